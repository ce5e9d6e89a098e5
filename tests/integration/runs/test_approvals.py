"""Approvals on a real deployment: a tool that requires one waits for a person, in a run and on its own."""

from __future__ import annotations

import time
import uuid
from typing import Any

from tests.integration.runs.conftest import Agent
from tests.support.model_server import call, say
from tests.support.receiver import Receiver
from tests.support.stack import Stack
from tests.support.tools import count_effects


def waiting_receipt(agent: Agent, run_id: str, timeout: float = 30) -> dict[str, Any]:
    """The run's tool call once it waits for its approval."""
    deadline = time.monotonic() + timeout
    with agent.client() as client:
        while time.monotonic() < deadline:
            run = client.get(f"/v1/runs/{run_id}").json()
            if run["status"] == "waiting":
                return agent.receipt(run["steps"][-1]["receipts"][0])
            time.sleep(0.1)
    raise AssertionError(f"the run never waited for an approval: {run}")


def test_a_run_waits_for_the_approval_and_goes_on_once_approved(stack: Stack, agent: Agent) -> None:
    tag = f"approved-{uuid.uuid4().hex[:8]}"
    agent.script(call(("c1", "guarded_write", {"tag": tag})), say("written"))
    started = agent.start(tools=["guarded_write"], expect=202).json()
    receipt = waiting_receipt(agent, started["id"])
    assert receipt["status"] == "waiting" and receipt["approval"]["state"] == "requested"
    assert receipt["approval"]["expires_at"] > receipt["approval"]["requested_at"]
    assert count_effects(stack.effects, tag) == 0
    with agent.client() as client:
        run = client.get(f"/v1/runs/{started['id']}", params={"wait_s": 1}).json()
        assert run["status"] == "waiting"
        approved = client.post(f"/v1/receipts/{receipt['id']}/approve", json={"by": "ana", "comment": "ok to go"})
        assert approved.status_code == 200, approved.text
        assert approved.json()["status"] == "pending"
        again = client.post(f"/v1/receipts/{receipt['id']}/approve", json={"by": "bo"})
        assert again.status_code == 409 and "approved by ana" in again.json()["detail"]
        events = client.get(f"/v1/receipts/{receipt['id']}/events").json()["data"]
    run = agent.wait(started["id"])
    assert run["status"] == "success" and run["output"] == "written"
    assert count_effects(stack.effects, tag, "ran") == 1
    done = agent.receipt(receipt["id"])
    assert done["status"] == "success"
    assert (done["approval"]["state"], done["approval"]["by"], done["approval"]["comment"]) == (
        "approved", "ana", "ok to go")
    decision = next(e for e in events if e["from_status"] == "waiting")
    assert (decision["to_status"], decision["actor"]) == ("pending", "person:ana")
    assert decision["detail"]["approval"]["state"] == "approved"


def test_a_rejection_reaches_the_model_as_a_tool_message(stack: Stack, agent: Agent) -> None:
    tag = f"rejected-{uuid.uuid4().hex[:8]}"
    agent.script(call(("c1", "guarded_write", {"tag": tag})), say("I will not write it, then."))
    started = agent.start(tools=["guarded_write"], expect=202).json()
    receipt = waiting_receipt(agent, started["id"])
    with agent.client() as client:
        rejected = client.post(f"/v1/receipts/{receipt['id']}/reject", json={"by": "ana", "reason": "too risky"})
        assert rejected.status_code == 200, rejected.text
    assert rejected.json()["status"] == "failed"
    assert rejected.json()["error"]["code"] == "rejected"
    run = agent.wait(started["id"])
    assert run["status"] == "success" and run["output"] == "I will not write it, then."
    told = [m for m in agent.models.requests_for(agent.model)[1].messages if m["role"] == "tool"][0]["content"]
    assert told.startswith("error: rejected: rejected by ana: too risky")
    assert count_effects(stack.effects, tag) == 0


def test_an_unanswered_approval_expires(stack: Stack, agent: Agent) -> None:
    tag = f"hasty-{uuid.uuid4().hex[:8]}"
    with agent.client() as client:
        accepted = client.post("/v1/tool-calls", json={"tool": "hasty_guarded_write", "arguments": {"tag": tag}})
        assert accepted.status_code == 202, accepted.text
        receipt = accepted.json()
        assert receipt["status"] == "waiting" and receipt["approval"]["state"] == "requested"
        done = client.get(f"/v1/receipts/{receipt['id']}", params={"wait_s": 20}).json()
        late = client.post(f"/v1/receipts/{receipt['id']}/approve", json={"by": "ana"})
    assert done["status"] == "failed" and done["error"]["code"] == "expired"
    assert done["approval"]["state"] == "expired"
    assert late.status_code == 409
    assert count_effects(stack.effects, tag) == 0


def test_a_call_outside_a_run_waits_and_runs_once_approved_with_webhooks(stack: Stack, agent: Agent) -> None:
    tag = f"alone-{uuid.uuid4().hex[:8]}"
    receiver = Receiver().start()
    try:
        with agent.client() as client:
            endpoint = client.post("/v1/webhook-endpoints", json={
                "url": receiver.url, "event_types": ["receipt.approval_requested", "receipt.succeeded"]})
            assert endpoint.status_code == 201, endpoint.text
            receiver.secrets.append(endpoint.json()["secret"])
            receipt = client.post("/v1/tool-calls", json={"tool": "guarded_write", "arguments": {"tag": tag}}).json()
            (asked,) = receiver.wait_for(1, timeout=30)
            assert asked.payload["type"] == "receipt.approval_requested"
            assert asked.payload["data"]["approval"]["state"] == "requested"
            assert client.post(f"/v1/receipts/{receipt['id']}/approve", json={"by": "ops"}).status_code == 200
            done = client.get(f"/v1/receipts/{receipt['id']}", params={"wait_s": 20}).json()
            _, succeeded = receiver.wait_for(2, timeout=30)
    finally:
        receiver.stop()
    assert done["status"] == "success" and done["output"] == {"written": tag}
    assert succeeded.payload["type"] == "receipt.succeeded" and succeeded.verified_by == (0,)


def test_deciding_needs_a_waiting_request_and_a_name(agent: Agent) -> None:
    with agent.client() as client:
        plain = client.post("/v1/tool-calls", json={"tool": "echo", "arguments": {}, "wait_s": 10}).json()
        refused = client.post(f"/v1/receipts/{plain['id']}/approve", json={"by": "ana"})
        assert refused.status_code == 409 and "does not wait for an approval" in refused.json()["detail"]
        assert client.post(f"/v1/receipts/{plain['id']}/reject", json={}).status_code == 422
        assert client.post("/v1/receipts/rcpt_nothing/approve", json={"by": "ana"}).status_code == 404
