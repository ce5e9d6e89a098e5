"""Recording an attempt killed by the hard time limit, on the real store: fenced by the attempt that
the killed process claimed."""

from __future__ import annotations

from receipts.db import Database
from receipts.store import calls
from receipts.store.calls import Result
from tests.support.factories import TENANT, RecordingSender, call, spec
from workers.execution import worker_actor
from workers.hard_limit import record_hard_timeout

KILLED_PID = 4242


def running(db: Database, pid: int) -> str:
    receipt, _ = db.run(calls.create(call(spec("lookup", effect="read"))))
    assert db.run(calls.claim(receipt.id, lease_s=60, actor=worker_actor(pid))) is not None
    return receipt.id


def test_the_attempt_the_killed_process_claimed_ends_failed_timeout(db: Database) -> None:
    receipt_id = running(db, KILLED_PID)
    recorded = record_hard_timeout(db, RecordingSender(), receipt_id, KILLED_PID, 11.0)
    assert recorded is not None and recorded.error is not None
    assert (recorded.status, recorded.attempt, recorded.error["code"]) == ("failed", 1, "timeout")
    assert recorded.error["retryable"] is False
    assert recorded.error["details"] == {"hard_time_limit_s": 11.0}
    assert "killed at the hard time limit (11 s)" in recorded.error["message"]
    last = db.run(calls.events(TENANT, receipt_id))[-1]
    assert (last.from_status, last.to_status, last.attempt, last.actor) == ("running", "failed", 1, worker_actor())


def test_a_process_that_claimed_nothing_records_nothing(db: Database) -> None:
    receipt_id = running(db, KILLED_PID)
    # Its message was a duplicate:
    assert record_hard_timeout(db, RecordingSender(), receipt_id, KILLED_PID + 1, 11.0) is None
    assert db.run(calls.load(receipt_id)).status == "running"  # type: ignore[union-attr]


def test_an_attempt_that_ended_first_is_left_as_it_ended(db: Database) -> None:
    receipt_id = running(db, KILLED_PID)
    assert db.run(calls.finish(receipt_id, 1, Result("success", output={"ok": True}), actor="worker:x:1"))
    assert record_hard_timeout(db, RecordingSender(), receipt_id, KILLED_PID, 11.0) is None
    final = db.run(calls.load(receipt_id))
    assert final is not None and (final.status, final.output) == ("success", {"ok": True})


def test_a_later_attempt_of_another_process_is_fenced_off(db: Database) -> None:
    receipt_id = running(db, KILLED_PID)
    assert db.run(calls.retry_later(receipt_id, 1, calls.error("timeout", "t", retryable=True), delay_s=0,
                                    published=True, actor="worker:x:1"))
    assert db.run(calls.claim(receipt_id, lease_s=60, actor=worker_actor(KILLED_PID + 1))) is not None
    assert record_hard_timeout(db, RecordingSender(), receipt_id, KILLED_PID, 11.0) is None
    current = db.run(calls.load(receipt_id))
    assert current is not None and (current.status, current.attempt) == ("running", 2)
