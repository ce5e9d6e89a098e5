"""api_call tools on the real deployment: the request sent, injections refused, upstream faults handled."""

from __future__ import annotations

import time
from typing import Any

from tests.integration.kinds.conftest import MAX_BYTES, define, run
from tests.support.stack import Stack
from tests.support.upstreams import Flood, Hang, Reply, Upstream

ITEM = {"type": "object", "properties": {"item": {"type": "string"}, "q": {"type": "string"}},
        "required": ["item"], "additionalProperties": False}


def api_tool(upstream: Upstream, name: str, path: str, **request: Any) -> dict[str, Any]:
    extra = {key: request.pop(key) for key in ("effect", "idempotent", "max_attempts") if key in request}
    return {"kind": "api_call", "name": name, "description": f"{name} for tests", "parameters": ITEM,
            "request": {"method": "GET", "url": upstream.url(path), "headers": {"X-Api-Key": "k-123"}, **request},
            **extra}


def events(stack: Stack, receipt_id: str) -> list[dict[str, Any]]:
    with stack.client() as client:
        return client.get(f"/v1/receipts/{receipt_id}/events").json()["data"]  # type: ignore[no-any-return]


def test_the_request_is_filled_sent_once_with_the_receipt_as_idempotency_key(stack: Stack, upstream: Upstream) -> None:
    upstream.route("/items/lamp", Reply(json={"item": "lamp", "stock": 3}))
    with stack.client() as client:
        tool = define(client, api_tool(upstream, "get_item", "/items/{item}"))
        assert tool["definition"]["request"]["headers"] == {"X-Api-Key": "********"}
        receipt = run(stack, client, "get_item", {"item": "lamp", "q": "x"})
    assert receipt["status"] == "success", receipt
    assert receipt["output"]["json"] == {"item": "lamp", "stock": 3}
    [seen] = upstream.requests_to("/items/lamp")
    assert seen.headers["idempotency-key"] == receipt["id"] and seen.headers["x-api-key"] == "k-123"
    assert seen.query == {"q": ["x"]}


def test_arguments_cannot_inject_a_host_a_header_or_a_path(stack: Stack, upstream: Upstream) -> None:
    upstream.route("/goods/evil.com%3A80%40127.0.0.2", Reply(json={"ok": 1}))
    upstream.route("/goods/ok", Reply(json={"ok": 2}))
    with stack.client() as client:
        define(client, api_tool(upstream, "get_goods", "/goods/{item}"))
        host = run(stack, client, "get_goods", {"item": "evil.com:80@127.0.0.2"})
        assert host["status"] == "success" and host["output"]["json"] == {"ok": 1}  # same host, one segment
        header = run(stack, client, "get_goods", {"item": "ok", "q": "1\r\nX-Api-Key: stolen\r\nHost: evil.com"})
        assert header["status"] == "success", header
        seen = upstream.requests_to("/goods/ok")[-1]
        assert seen.headers["x-api-key"] == "k-123" and seen.headers["host"] == f"127.0.0.1:{upstream.port}"
        before = len(upstream.seen)
        for value in ("../admin", "..", "a/../../secret"):
            traversal = run(stack, client, "get_goods", {"item": value})
            assert traversal["status"] == "failed" and traversal["error"]["code"] == "invalid_arguments"
        assert len(upstream.seen) == before


def test_a_redirect_to_a_private_address_is_refused(stack: Stack, upstream: Upstream) -> None:
    upstream.route("/go/meta", Reply(302, headers={"Location": "http://169.254.169.254/latest/meta-data/"}))
    upstream.route("/go/lan", Reply(302, headers={"Location": "http://192.168.0.1/"}))
    with stack.client() as client:
        define(client, api_tool(upstream, "follow_me", "/go/{item}", follow_redirects=True))
        for item in ("meta", "lan"):
            receipt = run(stack, client, "follow_me", {"item": item})
            assert receipt["status"] == "failed" and receipt["error"]["code"] == "forbidden", receipt


def test_an_upstream_that_hangs_times_out(stack: Stack, upstream: Upstream) -> None:
    upstream.route("/slow/x", Hang())
    with stack.client() as client:
        define(client, api_tool(upstream, "hanging", "/slow/{item}", timeout_s=1, max_attempts=1))
        started = time.monotonic()
        receipt = run(stack, client, "hanging", {"item": "x"})
    assert receipt["status"] == "failed" and receipt["error"]["code"] == "timeout", receipt
    assert time.monotonic() - started < 20


def test_500_is_retried_for_a_read_and_not_for_a_write(stack: Stack, upstream: Upstream) -> None:
    upstream.route("/flaky/a", Reply(500, body="oops"), Reply(json={"ok": True}))
    upstream.route("/pay/a", Reply(500, body="oops"))
    with stack.client() as client:
        define(client, api_tool(upstream, "flaky_read", "/flaky/{item}"))
        define(client, api_tool(upstream, "pay", "/pay/{item}", method="POST"))
        read = run(stack, client, "flaky_read", {"item": "a"})
        write = run(stack, client, "pay", {"item": "a"})
    assert (read["status"], read["attempt"]) == ("success", 2), read
    assert len(upstream.requests_to("/flaky/a")) == 2
    assert write["status"] == "failed" and write["error"]["code"] == "upstream_error", write
    assert write["error"]["retryable"] is True and "not_retried" in write["error"]["details"]
    assert len(upstream.requests_to("/pay/a")) == 1


def test_429_with_retry_after_is_honoured(stack: Stack, upstream: Upstream) -> None:
    upstream.route("/limited/a", Reply(429, body="slow down", headers={"Retry-After": "2"}), Reply(json={"ok": 1}))
    with stack.client() as client:
        define(client, api_tool(upstream, "limited", "/limited/{item}"))
        receipt = run(stack, client, "limited", {"item": "a"})
    assert (receipt["status"], receipt["attempt"]) == ("success", 2), receipt
    [retry] = [e for e in events(stack, receipt["id"]) if e["to_status"] == "pending" and e["from_status"]]
    assert retry["detail"]["error"]["retry_after_ms"] == 2000 and retry["detail"]["retry_in_s"] >= 2


def test_a_4xx_fails_at_once(stack: Stack, upstream: Upstream) -> None:
    upstream.route("/gone/a", Reply(410, json={"error": "gone"}))
    with stack.client() as client:
        define(client, api_tool(upstream, "gone", "/gone/{item}"))
        receipt = run(stack, client, "gone", {"item": "a"})
    assert receipt["status"] == "failed" and receipt["attempt"] == 1
    assert receipt["error"]["code"] == "upstream_error" and receipt["error"]["retryable"] is False
    assert receipt["error"]["details"]["status_code"] == 410


def test_a_50_mb_answer_is_capped(stack: Stack, upstream: Upstream) -> None:
    flood = Flood(50 * 1024 * 1024)
    upstream.route("/huge/a", flood)
    with stack.client() as client:
        define(client, api_tool(upstream, "huge", "/huge/{item}"))
        receipt = run(stack, client, "huge", {"item": "a"})
    assert receipt["status"] == "success", receipt
    assert receipt["output"]["truncated"] is True and len(receipt["output"]["text"]) == MAX_BYTES
    assert flood.sent < flood.size
