"""A batch's fingerprint is what its replays must repeat: kept where a replay can come (an
Idempotency-Key, or a trace with the model's call ids), and nowhere else."""

from __future__ import annotations

import json
from typing import Any

from tests.support import sql
from tests.unit.gateway.conftest import Gateway, assert_problem


def chat(n: int) -> dict[str, Any]:
    return {"role": "assistant", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": json.dumps({"n": n})}}]}


def open_batch(gateway: Gateway, n: int, **fields: Any) -> Any:
    return gateway.client.post("/v1/batches", headers=gateway.headers(),
                               json={"format": "openai_chat", "message": chat(n), "wait_s": 0, **fields})


def fingerprints(gateway: Gateway) -> list[str | None]:
    return [row[0] for row in sql.rows(gateway.db, "SELECT request_hash FROM batches ORDER BY created_at, id")]


def test_a_batch_without_a_key_or_a_trace_is_always_new_and_keeps_no_fingerprint(gateway: Gateway) -> None:
    first, again = open_batch(gateway, 1), open_batch(gateway, 1)
    assert (first.status_code, again.status_code) == (202, 202)
    assert first.json()["id"] != again.json()["id"] and "idempotent-replayed" not in again.headers
    assert fingerprints(gateway) == [None, None]
    assert gateway.receipt_count() == 2


def test_a_batch_under_a_trace_keeps_its_fingerprint_and_a_changed_replay_is_refused(gateway: Gateway) -> None:
    first, again = open_batch(gateway, 1, trace_id="trace_step_1"), open_batch(gateway, 1, trace_id="trace_step_1")
    assert again.json()["id"] == first.json()["id"] and again.headers["idempotent-replayed"] == "true"
    assert_problem(open_batch(gateway, 2, trace_id="trace_step_1"), 422)
    (stored,) = fingerprints(gateway)
    assert stored is not None and len(stored) == 64
    assert gateway.receipt_count() == 1
