"""Function tools on the real deployment: waiting, the outbox message, the client's result, expiry."""

from __future__ import annotations

from typing import Any

from receipts import tenants
from tests.integration.kinds.conftest import define, submit
from tests.support import sql
from tests.support.stack import Stack
from tests.support.upstreams import Upstream

PARAMS = {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}


def subscribe(stack: Stack, tenant_key: str, url: str) -> None:
    """A webhook endpoint of the tenant for receipt.waiting (delivery itself is the webhooks tests' business)."""
    owner = stack.db.run(tenants.for_key(tenant_key))
    assert owner is not None
    sql.execute(stack.db, "INSERT INTO webhook_endpoints (id, tenant_id, url, description, event_types, enabled, "
                          "secrets, created_at, updated_at) VALUES (%(id)s, %(tenant_id)s, %(url)s, 'kinds tests', "
                          "',receipt.waiting,', true, '[]', now(), now())",
                id=f"ep_kinds_{owner.id[-8:]}", tenant_id=owner.id, url=url)


def outbox(stack: Stack, receipt_id: str) -> list[tuple[Any, ...]]:
    return sql.rows(stack.db, "SELECT event_type, payload FROM webhook_messages WHERE receipt_id = %(id)s",
                    id=receipt_id)


def test_a_function_call_waits_then_takes_the_clients_result_once(stack: Stack, upstream: Upstream) -> None:
    subscribe(stack, stack.api_key, upstream.url("/hook"))
    with stack.client() as client:
        define(client, {"kind": "function", "name": "approve_refund", "description": "A person approves.",
                        "parameters": PARAMS})
        receipt = submit(client, "approve_refund", {"amount": 5})
        assert receipt["status"] == "waiting"
        [(event_type, payload)] = outbox(stack, receipt["id"])
        assert event_type == "receipt.waiting" and payload["data"]["id"] == receipt["id"]
        assert client.get(f"/v1/receipts/{receipt['id']}", params={"wait_s": 2}).json()["status"] == "waiting"
        with stack.client(stack.other_key) as intruder:
            forged = intruder.post(f"/v1/receipts/{receipt['id']}/result", json={"output": "forged"})
            assert forged.status_code == 404
        for shape in ({}, {"output": 1, "error": {"message": "x"}}, {"error": {"message": ""}}, {"result": 1}):
            assert client.post(f"/v1/receipts/{receipt['id']}/result", json=shape).status_code == 422
        done = client.post(f"/v1/receipts/{receipt['id']}/result", json={"output": {"approved": True}})
        assert done.status_code == 200 and done.json()["status"] == "success"
        again = client.post(f"/v1/receipts/{receipt['id']}/result", json={"output": {"approved": False}})
        assert again.status_code == 409
        assert again.headers["content-type"].startswith("application/problem+json")
        final = stack.wait_terminal(receipt["id"])
        assert (final["status"], final["output"]) == ("success", {"approved": True})


def test_a_function_call_without_a_result_expires_and_refuses_a_late_one(stack: Stack) -> None:
    with stack.client() as client:
        define(client, {"kind": "function", "name": "slow_human", "parameters": PARAMS, "timeout_s": 1})
        receipt = submit(client, "slow_human", {"amount": 1})
        final = stack.wait_terminal(receipt["id"], timeout=30)  # the sweeper (beat) expires it
        assert (final["status"], final["error"]["code"]) == ("failed", "expired")
        late = client.post(f"/v1/receipts/{receipt['id']}/result", json={"output": 1})
        assert late.status_code == 409
        assert client.get(f"/v1/receipts/{receipt['id']}").json()["status"] == "failed"
