"""Webhooks end to end: gateway, Celery workers (tools and the webhooks queue) and beat on PostgreSQL + Redis.

A real receiver on 127.0.0.1 verifies every request with the ``standardwebhooks`` library. The stack
allow-lists 127.0.0.0/8 for it and runs a shortened retry schedule (about a second between attempts)
and a 2 s request timeout.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.integration.webhooks.helpers import Hooks
from tests.support.clocks import unix
from tests.support.receiver import Receiver, Reply
from tests.support.stack import Process, Stack, free_port, running_stack, wait_serving

SETTINGS: dict[str, Any] = {"outbound_allow_cidrs": "127.0.0.0/8", "webhook_retry_schedule": "0,1,1,1,1,1",
            "webhook_timeout_s": 2, "webhook_poll_s": 0.5}


@pytest.fixture(scope="module")
def shared_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("webhooks"), **SETTINGS) as stack:
        yield stack


@pytest.fixture
def hooks(shared_stack: Stack) -> Hooks:
    return Hooks(shared_stack)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def test_receipt_changes_arrive_signed_with_the_receipt_as_data(hooks: Hooks, receiver: Receiver) -> None:
    endpoint = hooks.endpoint(receiver)
    receipt = hooks.call(arguments={"order": 42})
    final = hooks.finished(receipt["id"])
    assert final["status"] == "success"
    running = receiver.wait_for(1, type="receipt.running")[0]
    succeeded = receiver.wait_for(1, type="receipt.succeeded")[0]
    assert succeeded.payload["data"] == final
    assert running.payload["data"]["status"] == "running"
    for request in (running, succeeded):
        assert request.verified_by == (0,)
        assert request.headers["x-receipt-id"] == receipt["id"]
        assert request.headers["webhook-id"].startswith("msg_")
    failed = hooks.call("boom", {"message": "no"})
    receiver.wait_for(1, type="receipt.failed", receipt_id=failed["id"])
    log = hooks.wait_log(endpoint["id"], lambda ds: len(ds) == 4 and all(d["status"] == "delivered" for d in ds))
    attempt = log[0]["attempts"][0]
    assert attempt["status_code"] == 200 and attempt["success"] and attempt["response"] == "ok"
    assert attempt["latency_ms"] > 0 and attempt["error"] is None


def test_only_subscribed_types_are_sent(hooks: Hooks, receiver: Receiver) -> None:
    endpoint = hooks.endpoint(receiver, event_types=["receipt.failed"])
    ok = hooks.call()
    bad = hooks.call("boom", {"message": "no"})
    hooks.finished(ok["id"])
    hooks.finished(bad["id"])
    # Both calls have ended, and every message about them was written with its transition: the log
    # holds all this endpoint will ever be sent about them.
    log = hooks.wait_log(endpoint["id"], lambda ds: ds and all(d["status"] == "delivered" for d in ds))
    assert [(d["receipt_id"], d["event_type"]) for d in log] == [(bad["id"], "receipt.failed")]
    assert [r.payload["type"] for r in receiver.requests] == ["receipt.failed"]


def test_receiver_down_then_up(hooks: Hooks) -> None:
    receiver = Receiver()  # nothing listens on its port yet
    endpoint = hooks.endpoint(receiver, event_types=["receipt.succeeded"])
    hooks.finished(hooks.call()["id"])
    log = hooks.wait_log(endpoint["id"], lambda ds: ds and ds[0]["attempts"])
    assert log[0]["attempts"][0]["status_code"] is None and log[0]["attempts"][0]["error"]
    with receiver:
        request = receiver.wait_for(1)[0]
        assert request.verified_by == (0,)
        log = hooks.wait_log(endpoint["id"], lambda ds: ds[0]["status"] == "delivered")
    assert log[0]["attempts"][-1]["status_code"] == 200 and len(log[0]["attempts"]) >= 2


def test_500_then_200_keeps_the_webhook_id_and_re_signs(hooks: Hooks, receiver: Receiver) -> None:
    endpoint = hooks.endpoint(receiver, event_types=["receipt.succeeded"])
    # Retry-After: 1 holds the retry at least a second after the answer (the schedule's 1 s less its
    # jitter might not), so the two attempts are signed in different seconds for certain.
    receiver.respond(Reply(500, "try later", headers={"Retry-After": "1"}))
    hooks.call()
    first, second = receiver.wait_for(2)
    assert first.webhook_id == second.webhook_id
    assert second.timestamp > first.timestamp
    assert first.headers["webhook-signature"] != second.headers["webhook-signature"]  # signed afresh
    assert first.verified_by == second.verified_by == (0,)  # each signature matches its own timestamp
    log = hooks.wait_log(endpoint["id"], lambda ds: ds[0]["status"] == "delivered")
    assert [(a["status_code"], a["response"]) for a in log[0]["attempts"]] == [(500, "try later"), (200, "ok")]
    assert log[0]["id"] == first.webhook_id
    # Each attempt is signed with the second it was sent in, by the time the database recorded for it.
    for request, attempt in zip((first, second), log[0]["attempts"], strict=True):
        assert -1 < unix(attempt["at"]) - request.timestamp < 2, (request.headers, attempt)


def test_a_receiver_hanging_past_the_timeout(hooks: Hooks, receiver: Receiver) -> None:
    endpoint = hooks.endpoint(receiver, event_types=["receipt.succeeded"])
    receiver.respond(Reply(200, delay_s=30))
    hooks.call()
    log = hooks.wait_log(endpoint["id"], lambda ds: ds and ds[0]["status"] == "delivered")
    timed_out, delivered = log[0]["attempts"]
    assert timed_out["error"] == "timed out after 2 s" and timed_out["status_code"] is None
    assert 1900 <= timed_out["latency_ms"] < 10_000  # the 2 s timeout (slack for a loaded machine), not the 30 s hang
    assert delivered["status_code"] == 200
    assert receiver.wait_for(2)[1].verified_by == (0,)


def test_410_disables_the_endpoint(hooks: Hooks, receiver: Receiver) -> None:
    endpoint = hooks.endpoint(receiver, event_types=["receipt.succeeded"])
    receiver.respond(Reply(410, "unsubscribed"))
    hooks.call()
    log = hooks.wait_log(endpoint["id"], lambda ds: ds and ds[0]["status"] == "failed")
    assert [a["status_code"] for a in log[0]["attempts"]] == [410]
    after = hooks.get(f"/v1/webhook-endpoints/{endpoint['id']}")
    assert after["enabled"] is False and "410" in after["disabled_reason"]
    hooks.finished(hooks.call()["id"])  # its messages were written with its transitions: none for this endpoint
    assert len(hooks.deliveries(endpoint["id"])) == 1 and len(receiver.requests) == 1


def test_429_with_retry_after_is_honoured(hooks: Hooks, receiver: Receiver) -> None:
    endpoint = hooks.endpoint(receiver, event_types=["receipt.succeeded"])
    receiver.respond(Reply(429, "slow down", headers={"Retry-After": "4"}))
    hooks.call()
    first, second = receiver.wait_for(2)
    assert second.at - first.at >= 3.9  # the schedule alone would retry after about 1 s
    assert second.verified_by == (0,)
    hooks.wait_log(endpoint["id"], lambda ds: ds[0]["status"] == "delivered")


def test_a_redirect_is_a_failure_and_is_not_followed(hooks: Hooks, receiver: Receiver) -> None:
    with Receiver() as elsewhere:
        endpoint = hooks.endpoint(receiver, event_types=["receipt.succeeded"])
        receiver.respond(Reply(302, headers={"Location": elsewhere.url}))
        hooks.call()
        log = hooks.wait_log(endpoint["id"], lambda ds: ds and ds[0]["status"] == "delivered")
        assert elsewhere.requests == []
    redirect, delivered = log[0]["attempts"]
    assert redirect["status_code"] == 302 and not redirect["success"] and "not followed" in redirect["error"]
    assert delivered["status_code"] == 200


def test_a_calls_own_webhook_url_with_the_tenant_default_secret(hooks: Hooks, receiver: Receiver) -> None:
    with hooks.client() as client:
        refused = client.post("/v1/tool-calls", json={"tool": "echo", "arguments": {}, "webhook_url": receiver.url})
        assert refused.status_code == 422 and refused.headers["content-type"] == "application/problem+json"
        created = client.post("/v1/webhook-secret")
        assert created.status_code == 201
    receiver.secrets.append(created.json()["secret"])
    receipt = hooks.call(webhook_url=receiver.url)
    requests = receiver.wait_for(2, receipt_id=receipt["id"])
    assert {r.payload["type"] for r in requests} == {"receipt.running", "receipt.succeeded"}
    assert all(r.verified_by == (0,) for r in requests)
    listed = hooks.get(f"/v1/deliveries?receipt_id={receipt['id']}")["data"]
    assert {d["url"] for d in listed} == {receiver.url}


def test_rotation_keeps_the_old_secret_valid_during_the_grace_period(hooks: Hooks, receiver: Receiver) -> None:
    endpoint = hooks.endpoint(receiver, event_types=["receipt.succeeded"])
    with hooks.client() as client:
        rotated = client.post(f"/v1/webhook-endpoints/{endpoint['id']}/rotate-secret").json()
    receiver.secrets.append(rotated["secret"])
    hooks.call()
    request = receiver.wait_for(1)[0]
    assert len(request.signatures) == 2 and all(s.startswith("v1,") for s in request.signatures)
    assert request.verified_by == (0, 1)


def test_manual_retry_and_recover(hooks: Hooks, receiver: Receiver) -> None:
    since = datetime.now(UTC).isoformat()
    endpoint = hooks.endpoint(receiver, event_types=["receipt.succeeded"])
    receiver.default = Reply(500, "broken")
    hooks.call()
    hooks.call()
    failed = hooks.wait_log(endpoint["id"], lambda ds: len(ds) == 2 and all(d["status"] == "failed" for d in ds),
                            timeout=60)
    assert all(len(d["attempts"]) == 6 for d in failed)  # the whole (shortened) schedule
    receiver.default = Reply(200)
    with hooks.client() as client:
        retried = client.post(f"/v1/deliveries/{failed[0]['id']}/retry")
        assert retried.status_code == 202
        hooks.wait_log(endpoint["id"], lambda ds: {d["id"]: d["status"] for d in ds}[failed[0]["id"]] == "delivered")
        recovered = client.post(f"/v1/webhook-endpoints/{endpoint['id']}/recover", json={"since": since})
        assert recovered.status_code == 202 and recovered.json() == {"recovered": 1}
    hooks.wait_log(endpoint["id"], lambda ds: all(d["status"] == "delivered" for d in ds))
    ok = [r for r in receiver.requests if r.webhook_id in {failed[0]["id"], failed[1]["id"]}]
    assert len(ok) == 14 and all(r.verified_by == (0,) for r in ok)


def test_bad_endpoints_are_refused_with_problem_details(hooks: Hooks) -> None:
    with hooks.client() as client:
        for body, field in (({"url": "http://169.254.169.254/latest/meta-data"}, "url"),
                            ({"url": "not a url"}, "url"),
                            ({"url": "http://127.0.0.1:9/hook", "event_types": ["receipt.teleported"]},
                             "event_types.0")):
            response = client.post("/v1/webhook-endpoints", json=body)
            assert response.status_code == 422, response.text
            assert response.headers["content-type"] == "application/problem+json"
            assert response.json()["errors"][0]["field"] == field
        assert client.get("/v1/webhook-endpoints").json()["data"] == []


def test_loopback_is_refused_by_a_gateway_without_an_allow_list(shared_stack: Stack) -> None:
    port = free_port()
    env = {**shared_stack.env, "TOOLRELAY_OUTBOUND_ALLOW_CIDRS": ""}
    gateway = Process("gateway-guarded", [sys.executable, "-m", "toolrelay", "gateway", "--port", str(port)], env,
                      shared_stack.tmp)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_serving(gateway, base)
        headers = {"Authorization": f"Bearer {shared_stack.api_key}"}
        for url in ("http://127.0.0.1:8080/hook", "http://localhost/hook", "http://169.254.169.254/latest"):
            response = httpx.post(f"{base}/v1/webhook-endpoints", json={"url": url}, headers=headers)
            assert response.status_code == 422, response.text
            assert response.json()["errors"][0]["field"] == "url"
    finally:
        gateway.kill(signal.SIGTERM)
