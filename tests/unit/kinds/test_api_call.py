"""api_call tools end to end in a worker: templating, Idempotency-Key, error mapping, size cap, SSRF guard."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from receipts.catalogue import tools as catalogue
from receipts.db import Database
from tests.support import sql
from tests.support.upstreams import Flood, Hang, Reply, Upstream, serving
from tests.unit.kinds.conftest import Worker, make_settings

USER = {"type": "object", "properties": {"user": {"type": "string"}, "q": {"type": "string"}},
        "required": ["user"], "additionalProperties": False}


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with serving() as running:
        yield running


def define(worker: Worker, upstream: Upstream, path: str = "/users/{user}", *, name: str = "get_user",
           parameters: dict[str, Any] | None = None, **request: Any) -> None:
    tool: dict[str, Any] = {"kind": "api_call", "name": name, "parameters": parameters or USER,
                            "request": {"method": "GET", "url": upstream.url(path),
                                        "headers": {"Authorization": "Bearer t0ken"}, **request}}
    for key in ("effect", "idempotent", "max_attempts"):
        if key in request:
            tool[key] = tool["request"].pop(key)
    worker.define(tool)


def test_json_answer_is_the_output_and_the_receipt_id_is_the_idempotency_key(worker: Worker,
                                                                             upstream: Upstream) -> None:
    upstream.route("/users/ann", Reply(json={"id": 7, "name": "Ann"}, headers={"X-Rate": "9"}))
    define(worker, upstream)
    receipt = worker.run("get_user", {"user": "ann", "q": "x y"})
    assert receipt.status == "success", receipt.error
    assert receipt.output["status_code"] == 200 and receipt.output["json"] == {"id": 7, "name": "Ann"}
    assert receipt.output["headers"]["x-rate"] == "9"
    [seen] = upstream.requests_to("/users/ann")
    assert seen.headers["idempotency-key"] == receipt.id
    assert seen.headers["authorization"] == "Bearer t0ken"
    assert seen.query == {"q": ["x y"]}


def test_post_body_template_and_text_answers(worker: Worker, upstream: Upstream) -> None:
    upstream.route("/orders", Reply(201, body="created order 12", headers={"Content-Type": "text/plain"}))
    parameters = {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                  "required": ["sku", "qty"]}
    define(worker, upstream, "/orders", name="order", parameters=parameters, method="POST",
           body={"item": {"sku": "{sku}", "quantity": "{qty}"}, "note": "qty {qty}"})
    receipt = worker.run("order", {"sku": "A-1", "qty": 3})
    assert receipt.status == "success", receipt.error
    assert receipt.output == {"status_code": 201, "headers": receipt.output["headers"], "text": "created order 12",
                              "truncated": False}
    [seen] = upstream.requests_to("/orders")
    assert seen.json() == {"item": {"sku": "A-1", "quantity": 3}, "note": "qty 3"}
    assert seen.headers["idempotency-key"] == receipt.id


def test_arguments_cannot_inject_a_host_a_header_or_a_path(worker: Worker, upstream: Upstream) -> None:
    upstream.route("/users/evil.com%40127.0.0.2%3A1", Reply(json={"ok": True}))
    upstream.route("/users/ann", Reply(json={"ok": True}))
    define(worker, upstream)
    host = worker.run("get_user", {"user": "evil.com@127.0.0.2:1"})
    assert host.status == "success", host.error  # stayed on the defined host, as one encoded segment
    assert upstream.seen[-1].raw_path == "/users/evil.com%40127.0.0.2%3A1"
    header = worker.run("get_user", {"user": "ann", "q": "x\r\nX-Injected: yes\r\nAuthorization: stolen"})
    assert header.status == "success", header.error
    seen = upstream.seen[-1]
    assert "x-injected" not in seen.headers and seen.headers["authorization"] == "Bearer t0ken"
    assert seen.query == {"q": ["x\r\nX-Injected: yes\r\nAuthorization: stolen"]}
    count = len(upstream.seen)
    for value in ("../admin", "..", "a/../../etc/passwd", "x\\..\\y"):
        traversal = worker.run("get_user", {"user": value})
        assert traversal.status == "failed"
        assert traversal.error["code"] == "invalid_arguments" and "user" in traversal.error["message"]
    assert len(upstream.seen) == count  # nothing was sent


def test_a_4xx_fails_for_good_without_a_retry(worker: Worker, upstream: Upstream) -> None:
    upstream.route("/users/ghost", Reply(404, json={"error": "no such user"}))
    define(worker, upstream)
    receipt = worker.run("get_user", {"user": "ghost"})
    assert receipt.status == "failed"
    assert receipt.error["code"] == "upstream_error" and receipt.error["retryable"] is False
    assert receipt.error["details"]["status_code"] == 404 and "no such user" in receipt.error["details"]["body"]
    assert len(upstream.seen) == 1


def test_a_5xx_is_retried_for_a_read_tool_until_it_succeeds(worker: Worker, upstream: Upstream) -> None:
    upstream.route("/users/ann", Reply(500, body="boom"), Reply(503, body="busy"), Reply(json={"ok": True}))
    define(worker, upstream)
    receipt = worker.run("get_user", {"user": "ann"})
    for _ in range(2):
        assert receipt.status == "pending" and receipt.error["code"] == "upstream_error"
        assert receipt.error["retryable"] is True
        receipt = worker.execute(receipt.id)
    assert (receipt.status, receipt.attempt, receipt.output["json"]) == ("success", 3, {"ok": True})


def test_a_5xx_of_a_non_idempotent_write_is_never_retried(worker: Worker, upstream: Upstream) -> None:
    upstream.route("/charges", Reply(502, body="bad gateway"))
    define(worker, upstream, "/charges", name="charge", method="POST",
           parameters={"type": "object", "properties": {"cents": {"type": "integer"}}})
    receipt = worker.run("charge", {"cents": 100})
    assert receipt.status == "failed" and receipt.error["code"] == "upstream_error"
    assert "not_retried" in receipt.error["details"]
    assert len(upstream.seen) == 1


def test_429_with_retry_after_schedules_the_retry_no_sooner(worker: Worker, upstream: Upstream) -> None:
    upstream.route("/users/ann", Reply(429, body="slow down", headers={"Retry-After": "3"}))
    define(worker, upstream)
    before = sql.value(worker.db, "SELECT now()")  # the database's clock, which schedules the retry
    receipt = worker.run("get_user", {"user": "ann"})
    assert receipt.status == "pending"
    assert receipt.error["retry_after_ms"] == 3000 and receipt.error["retryable"] is True
    assert receipt.available_at - before >= timedelta(seconds=3)


def test_an_upstream_that_hangs_times_out(worker: Worker, upstream: Upstream) -> None:
    upstream.route("/users/ann", Hang())
    define(worker, upstream, timeout_s=1, max_attempts=1)
    started = time.monotonic()
    receipt = worker.run("get_user", {"user": "ann"})
    assert receipt.status == "failed" and receipt.error["code"] == "timeout"
    assert time.monotonic() - started < 10


def test_a_50_mb_answer_is_cut_at_the_cap_without_reading_it_all(worker: Worker, upstream: Upstream) -> None:
    flood = Flood(50 * 1024 * 1024)
    upstream.route("/users/ann", flood)
    define(worker, upstream)
    receipt = worker.run("get_user", {"user": "ann"})
    assert receipt.status == "success", receipt.error
    cap = worker.settings.http_max_bytes
    assert receipt.output["truncated"] is True and receipt.output["max_bytes"] == cap
    assert len(receipt.output["text"]) == cap
    deadline = time.monotonic() + 10
    while not flood.broken and time.monotonic() < deadline:
        time.sleep(0.05)
    assert flood.broken and flood.sent < flood.size  # the reader hung up long before 50 MB


@pytest.mark.parametrize("target", ["http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/admin",
                                    "http://[::ffff:192.168.1.1]/", "file:///etc/passwd"])
def test_a_redirect_to_a_private_address_is_refused(worker: Worker, upstream: Upstream, target: str) -> None:
    upstream.route("/users/ann", Reply(302, headers={"Location": target}))
    define(worker, upstream, follow_redirects=True)
    receipt = worker.run("get_user", {"user": "ann"})
    assert receipt.status == "failed"
    assert receipt.error["code"] == "forbidden" and receipt.error["retryable"] is False


def test_redirects_are_followed_when_asked_and_credentials_stay_on_their_origin(worker: Worker,
                                                                               upstream: Upstream) -> None:
    with serving() as other:
        other.route("/elsewhere", Reply(json={"moved": True}))
        upstream.route("/users/ann", Reply(307, headers={"Location": "/users/bob"}))
        upstream.route("/users/bob", Reply(302, headers={"Location": other.url("/elsewhere")}))
        define(worker, upstream, follow_redirects=True)
        receipt = worker.run("get_user", {"user": "ann"})
        assert receipt.status == "success", receipt.error
        assert receipt.output["json"] == {"moved": True}
        assert upstream.requests_to("/users/bob")[0].headers["authorization"] == "Bearer t0ken"
        [moved] = other.requests_to("/elsewhere")
        assert "authorization" not in moved.headers and moved.headers["idempotency-key"] == receipt.id
    upstream.route("/users/carl", Reply(302, headers={"Location": "/users/ann"}))
    define(worker, upstream, name="no_follow")
    unfollowed = worker.run("no_follow", {"user": "carl"})
    assert unfollowed.status == "success" and unfollowed.output["status_code"] == 302


def test_the_guard_is_checked_at_send_time_not_only_at_definition(db: Database, upstream: Upstream) -> None:
    upstream.route("/users/ann", Reply(json={"ok": True}))
    define(Worker(db, make_settings(db)), upstream)  # defined while loopback was allowed
    strict = Worker(db, make_settings(db, outbound_allow_cidrs=[]))
    receipt = strict.run("get_user", {"user": "ann"})
    assert receipt.status == "failed" and receipt.error["code"] == "forbidden"
    assert "127.0.0.1" in receipt.error["message"]
    assert upstream.seen == []


def test_a_removed_tool_fails_its_pending_calls(worker: Worker, upstream: Upstream) -> None:
    define(worker, upstream)
    pending = worker.submit("get_user", {"user": "ann"})
    worker.db.run(catalogue.remove(worker.tenant, "get_user"))
    receipt = worker.execute(pending.id)
    assert receipt.status == "failed" and receipt.error["code"] == "not_found"
    assert upstream.seen == []
