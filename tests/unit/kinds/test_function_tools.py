"""Function (client-run) tools: calls wait for POST /v1/receipts/{id}/result, once, in time, well-formed."""

from __future__ import annotations

from typing import Any

import pytest

from receipts.store import calls
from receipts.store.sweeps import sweep
from tests.support import sql
from tests.unit.kinds.conftest import Gateway, assert_problem

PARAMS = {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}


def define(gateway: Gateway, **extra: Any) -> None:
    response = gateway.post("/v1/tools", {"kind": "function", "name": "approve_refund",
                                          "description": "A person approves a refund.", "parameters": PARAMS, **extra})
    assert response.status_code == 201, response.text


def call(gateway: Gateway, **extra: Any) -> dict[str, Any]:
    response = gateway.post("/v1/tool-calls", {"tool": "approve_refund", "arguments": {"amount": 5}, **extra})
    assert response.status_code == 202, response.text
    return response.json()  # type: ignore[no-any-return]


def subscribe(gateway: Gateway) -> None:
    """A webhook endpoint of the tenant, for every event type (written directly: delivery is not tested here)."""
    sql.execute(gateway.db, "INSERT INTO webhook_endpoints (id, tenant_id, url, description, event_types, enabled, "
                            "secrets, created_at, updated_at) VALUES ('ep_test', %(tenant_id)s, "
                            "'https://93.184.215.14/hook', '', '', true, '[]', now(), now())",
                tenant_id=gateway.tenant_id)


def waiting_messages(gateway: Gateway, receipt_id: str) -> list[dict[str, Any]]:
    """The payloads of the receipt's ``receipt.waiting`` webhook messages."""
    rows = sql.rows(gateway.db, "SELECT payload FROM webhook_messages WHERE receipt_id = %(receipt_id)s "
                                "AND event_type = 'receipt.waiting'", receipt_id=receipt_id)
    return [payload for (payload,) in rows]


def test_a_call_waits_announces_itself_and_takes_the_clients_result(gateway: Gateway) -> None:
    define(gateway)
    subscribe(gateway)
    receipt = call(gateway, wait_s=5)
    assert receipt["status"] == "waiting" and receipt["kind"] == "function"
    assert gateway.sender.executes() == []  # no worker ever runs it
    [payload] = waiting_messages(gateway, receipt["id"])
    assert payload["data"]["status"] == "waiting"
    done = gateway.post(f"/v1/receipts/{receipt['id']}/result", {"output": {"approved": True}})
    assert done.status_code == 200, done.text
    assert (done.json()["status"], done.json()["output"]) == ("success", {"approved": True})
    events = gateway.get(f"/v1/receipts/{receipt['id']}/events").json()["data"]
    assert [(e["to_status"], e["actor"]) for e in events] == [("waiting", "api"), ("success", "client")]


def test_an_error_result_fails_the_call_with_the_clients_message(gateway: Gateway) -> None:
    define(gateway)
    receipt = call(gateway)
    failed = gateway.post(f"/v1/receipts/{receipt['id']}/result",
                          {"error": {"message": "the manager said no", "details": {"by": "bob"}}}).json()
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "tool_error", "message": "the manager said no", "retryable": False,
                               "retry_after_ms": None, "details": {"by": "bob"}}


def test_a_second_result_is_refused_and_changes_nothing(gateway: Gateway) -> None:
    define(gateway)
    receipt = call(gateway)
    assert gateway.post(f"/v1/receipts/{receipt['id']}/result", {"output": 1}).status_code == 200
    assert_problem(gateway.post(f"/v1/receipts/{receipt['id']}/result", {"output": 2}), 409)
    assert_problem(gateway.post(f"/v1/receipts/{receipt['id']}/result", {"error": {"message": "late"}}), 409)
    final = gateway.get(f"/v1/receipts/{receipt['id']}").json()
    assert (final["status"], final["output"]) == ("success", 1)


def test_another_tenant_cannot_post_the_result(gateway: Gateway) -> None:
    define(gateway)
    receipt = call(gateway)
    assert_problem(gateway.post(f"/v1/receipts/{receipt['id']}/result", {"output": "forged"}, key=gateway.other_key),
                   404)
    assert gateway.get(f"/v1/receipts/{receipt['id']}").json()["status"] == "waiting"
    assert_problem(gateway.post("/v1/receipts/rcpt_doesnotexist/result", {"output": 1}), 404)


def test_a_result_after_the_deadline_is_refused_and_the_call_expires(gateway: Gateway) -> None:
    define(gateway)
    receipt = call(gateway, timeout_s=0.5)
    sql.wait_until(gateway.db, "SELECT deadline_at <= now() FROM receipts WHERE id = %(id)s", id=receipt["id"])
    body = assert_problem(gateway.post(f"/v1/receipts/{receipt['id']}/result", {"output": 1}), 409)
    assert "deadline" in body["detail"]
    gateway.db.run(sweep(republish_after_s=30))
    final = gateway.get(f"/v1/receipts/{receipt['id']}").json()
    assert (final["status"], final["error"]["code"]) == ("failed", "expired")
    assert_problem(gateway.post(f"/v1/receipts/{receipt['id']}/result", {"output": 1}), 409)


def test_the_tools_timeout_is_the_default_deadline_and_31_days_the_limit(gateway: Gateway) -> None:
    define(gateway, timeout_s=120)
    receipt = call(gateway)
    assert gateway.db.run(calls.get(gateway.tenant_id, receipt["id"])).timeout_s == 120
    created = gateway.db.run(calls.get(gateway.tenant_id, receipt["id"]))
    assert abs((created.deadline_at - created.created_at).total_seconds() - 120) < 1
    assert_problem(gateway.post("/v1/tool-calls", {"tool": "approve_refund", "arguments": {"amount": 1},
                                                   "timeout_s": 32 * 24 * 3600}), 422, "timeout_s")


@pytest.mark.parametrize("body", [
    {},
    {"output": 1, "error": {"message": "both"}},
    {"error": {"details": {}}},
    {"error": {"message": ""}},
    {"error": {"message": 42}},
    {"error": "a string"},
    {"output": 1, "status": "success"},
    ["output"],
])
def test_a_result_of_the_wrong_shape_is_refused(gateway: Gateway, body: Any) -> None:
    define(gateway)
    receipt = call(gateway)
    assert_problem(gateway.post(f"/v1/receipts/{receipt['id']}/result", body), 422)
    assert gateway.get(f"/v1/receipts/{receipt['id']}").json()["status"] == "waiting"


def test_malformed_json_is_a_400_and_a_non_function_receipt_takes_no_result(gateway: Gateway) -> None:
    define(gateway)
    receipt = call(gateway)
    response = gateway.client.post(f"/v1/receipts/{receipt['id']}/result", content=b"{not json",
                                   headers={**gateway.headers(), "Content-Type": "application/json"})
    assert_problem(response, 400)
    echo = gateway.post("/v1/tool-calls", {"tool": "echo", "arguments": {}}).json()
    assert_problem(gateway.post(f"/v1/receipts/{echo['id']}/result", {"output": 1}), 409)
    assert gateway.get(f"/v1/receipts/{echo['id']}").json()["status"] == "pending"
