"""Webhook delivery across process deaths, on PostgreSQL + Redis with real worker processes.

The outbox row is committed in the same transaction as the transition it reports, so a delivery
survives the death of the worker that made the transition and of the dispatcher that was sending it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.integration.webhooks.helpers import Hooks
from tests.support import sql
from tests.support.receiver import Receiver, Reply
from tests.support.stack import running_stack

SETTINGS: dict[str, Any] = {"outbound_allow_cidrs": "127.0.0.0/8", "webhook_retry_schedule": "0,1,1,1,1,1,1,1",
            "webhook_timeout_s": 2, "webhook_poll_s": 0.5}


def pending_messages(hooks: Hooks) -> list[str]:
    return [row[0] for row in sql.rows(hooks.stack.db, "SELECT id FROM webhook_messages WHERE status = 'pending'")]


def test_worker_killed_between_the_receipt_update_and_the_delivery(tmp_path: Path) -> None:
    with running_stack(tmp_path, workers=0, **SETTINGS) as stack, Receiver() as receiver:
        hooks = Hooks(stack)
        hooks.endpoint(receiver, event_types=["receipt.succeeded"])
        # This worker runs tools but not the dispatcher: it dies after the transition, before any delivery.
        tools_only = stack.start_worker("-Q", "tools")
        receipt = hooks.call(arguments={"survives": True})
        assert hooks.finished(receipt["id"])["status"] == "success"
        tools_only.kill()
        assert len(pending_messages(hooks)) == 1 and receiver.requests == []
        stack.start_worker()  # a worker that also serves the webhooks queue
        request = receiver.wait_for(1, timeout=60)[0]
        assert request.verified_by == (0,) and request.payload["data"]["id"] == receipt["id"]
        assert request.payload["data"]["status"] == "success"
        deadline = time.monotonic() + 30
        while pending_messages(hooks):  # the attempt is recorded just after the receiver answered
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_dispatcher_restarted_with_deliveries_due(tmp_path: Path) -> None:
    # A small batch keeps the lease short (2 s timeout x 2 rounds + 5 s) so the test does not wait long.
    with running_stack(tmp_path, webhook_batch=8, webhook_concurrency=8, **SETTINGS) as stack, \
            Receiver() as receiver:
        hooks = Hooks(stack)
        endpoint = hooks.endpoint(receiver, event_types=["receipt.succeeded"])
        receiver.respond(Reply(200, delay_s=60))  # the first request hangs while its dispatcher dies
        first = hooks.call()
        hanging = receiver.wait_for(1, timeout=60)[0]
        dispatcher = stack.processes[1]
        assert dispatcher.name == "worker1"
        dispatcher.kill()
        # Calls accepted while no worker runs: they wait, and so do their messages, with nobody to run
        # or send anything; the only message is the first call's, leased to the dead dispatcher.
        later = [hooks.call() for _ in range(3)]
        assert sql.rows(stack.db, "SELECT status FROM receipts WHERE id = ANY(%(ids)s)",
                        ids=[r["id"] for r in later]) == [("pending",)] * 3
        assert sql.rows(stack.db, "SELECT id FROM webhook_messages") == [(hanging.webhook_id,)]
        assert len(receiver.requests) == 1
        stack.start_worker()
        for receipt in later:
            receiver.wait_for(1, timeout=60, receipt_id=receipt["id"], type="receipt.succeeded")
        # The hanging attempt's lease runs out, then the new dispatcher sends it again.
        receiver.wait_for(2, timeout=60, receipt_id=first["id"], type="receipt.succeeded")
        again = [r for r in receiver.requests if r.webhook_id == hanging.webhook_id]
        assert len(again) == 2  # at least once: the lost attempt was sent again, under the same id
        assert all(r.verified_by == (0,) for r in receiver.requests)
        hooks.wait_log(endpoint["id"], lambda ds: len(ds) == 4 and all(d["status"] == "delivered" for d in ds))


def test_an_endpoint_failing_continuously_is_disabled_with_the_reason(tmp_path: Path) -> None:
    with running_stack(tmp_path, webhook_disable_after_s=3, **SETTINGS) as stack, Receiver() as receiver:
        hooks = Hooks(stack)
        endpoint = hooks.endpoint(receiver, event_types=["receipt.succeeded"])
        receiver.default = Reply(500, "database is down")
        hooks.call()
        deadline = time.monotonic() + 60
        while (state := hooks.get(f"/v1/webhook-endpoints/{endpoint['id']}"))["enabled"]:
            assert time.monotonic() < deadline, state
            time.sleep(0.3)
        assert "every delivery failed from" in state["disabled_reason"]
        assert "HTTP 500" in state["disabled_reason"] and state["failing_since"]
        with hooks.client() as client:
            enabled = client.patch(f"/v1/webhook-endpoints/{endpoint['id']}", json={"enabled": True}).json()
        assert enabled["enabled"] is True and enabled["disabled_reason"] is None and enabled["failing_since"] is None
