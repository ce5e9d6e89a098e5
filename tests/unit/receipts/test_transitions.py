"""A transition is one statement: all of it happens or none of it, and its times are the database's.

The receipt's new state, its line in the timeline and its outbox rows are written together; a
failure of any of them leaves the receipt exactly as it was. Every time a transition writes is the
database's ``now()`` plus an interval, so these tests compare with ``SELECT now()`` read around the
call, never with this host's clock.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from receipts import states
from receipts.db import Database, Op
from receipts.records import Receipt
from receipts.store import approvals, calls
from receipts.store.calls import Result, error
from receipts.store.sweeps import sweep
from tests.support import sql
from tests.support.factories import TENANT, call, spec


def db_now(db: Database) -> datetime:
    return sql.value(db, "SELECT now()")  # type: ignore[no-any-return]


def snapshot(db: Database, receipt_id: str) -> tuple[Receipt | None, int, int]:
    """The receipt row, and how many timeline and outbox rows it has."""
    return (db.run(calls.load(receipt_id)),
            sql.value(db, "SELECT count(*) FROM receipt_events WHERE receipt_id = %(id)s", id=receipt_id),
            sql.value(db, "SELECT count(*) FROM webhook_messages WHERE receipt_id = %(id)s", id=receipt_id))


def pending(db: Database) -> Receipt:
    receipt, _ = db.run(calls.create(call(spec("lookup"))))
    return receipt


def running(db: Database) -> Receipt:
    receipt = pending(db)
    assert db.run(calls.claim(receipt.id, lease_s=30, actor="w")) is not None
    return receipt


def awaiting_approval(db: Database) -> Receipt:
    """A call of a tool a person must allow, waiting for the decision."""
    receipt, _ = db.run(calls.create(call(spec("refund", effect="write", idempotent=False), approval_timeout_s=600),
                                     status=states.WAITING))
    assert receipt.approval is not None and receipt.approval["state"] == "requested"
    return receipt


def awaiting_result(db: Database) -> Receipt:
    """A call of a function tool, waiting for its client to post the result."""
    receipt, _ = db.run(calls.create(call(spec("ask_user", kind="function")), status=states.WAITING))
    return receipt


Transition = Callable[[Receipt], Op[Any]]

TRANSITIONS: dict[str, tuple[Callable[[Database], Receipt], Transition, str, str | None]] = {
    # name: (the receipt before, the transition, its timeline status, its webhook type)
    "claim": (pending, lambda r: calls.claim(r.id, lease_s=30, actor="w"), "running", "receipt.running"),
    "finish": (running, lambda r: calls.finish(r.id, 1, Result("success", output={"ok": True}), actor="w"),
               "success", "receipt.succeeded"),
    "fail": (running, lambda r: calls.finish(r.id, 1, Result("failed", error=error("tool_error", "no")), actor="w"),
             "failed", "receipt.failed"),
    "cancel pending": (pending, lambda r: calls.cancel(TENANT, r.id), "canceled", "receipt.canceled"),
    "cancel running": (running, lambda r: calls.cancel(TENANT, r.id), "canceled", "receipt.canceled"),
    "retry": (running, lambda r: calls.retry_later(r.id, 1, error("timeout", "slow", retryable=True), delay_s=1,
                                                   published=True, actor="w"), "pending", None),
    "approve": (awaiting_approval, lambda r: approvals.approve(TENANT, r.id, by="ann"), "pending", None),
    "reject": (awaiting_approval, lambda r: approvals.reject(TENANT, r.id, by="ann", reason="no"), "failed",
               "receipt.failed"),
    "post a result": (awaiting_result, lambda r: calls.complete_waiting(TENANT, r.id, Result("success", output=1),
                                                                        actor="client"), "success",
                      "receipt.succeeded"),
    "post an error": (awaiting_result, lambda r: calls.complete_waiting(
        TENANT, r.id, Result("failed", error=error("tool_error", "no")), actor="client"), "failed", "receipt.failed"),
}
OUTBOX_CASES = [name for name, (*_, webhook) in TRANSITIONS.items() if webhook is not None]


@pytest.mark.parametrize("name", list(TRANSITIONS))
def test_a_transition_whose_timeline_write_fails_changes_nothing(db: Database, name: str) -> None:
    before_state, transition, status, _ = TRANSITIONS[name]
    sql.subscribe_to_everything(db, TENANT)
    receipt = before_state(db)
    before = snapshot(db, receipt.id)
    heard: list[Any] = []
    db.subscribe(heard.append)
    sql.refuse_inserts(db, "receipt_events", f"NEW.to_status = '{status}'")
    with pytest.raises(psycopg.errors.RaiseException, match="refused by the test"):
        db.run(transition(receipt))
    assert snapshot(db, receipt.id) == before
    assert heard == []


@pytest.mark.parametrize("name", OUTBOX_CASES)
def test_a_transition_whose_outbox_write_fails_changes_nothing(db: Database, name: str) -> None:
    before_state, transition, _, webhook = TRANSITIONS[name]
    sql.subscribe_to_everything(db, TENANT)
    receipt = before_state(db)
    before = snapshot(db, receipt.id)
    heard: list[Any] = []
    db.subscribe(heard.append)
    sql.refuse_inserts(db, "webhook_messages", f"NEW.event_type = '{webhook}'")
    with pytest.raises(psycopg.errors.RaiseException, match="refused by the test"):
        db.run(transition(receipt))
    assert snapshot(db, receipt.id) == before
    assert heard == []


CREATIONS = {
    # name: (the call, its first status, the first write to refuse)
    "timeline": (call(spec("lookup")), states.PENDING, ("receipt_events", "NEW.to_status = 'pending'")),
    "outbox": (call(spec("refund", effect="write", idempotent=False), approval_timeout_s=600), states.WAITING,
               ("webhook_messages", "NEW.event_type = 'receipt.approval_requested'")),
}


@pytest.mark.parametrize("name", list(CREATIONS))
def test_a_call_whose_first_writes_fail_is_not_stored(db: Database, name: str) -> None:
    new, status, (table, condition) = CREATIONS[name]
    sql.subscribe_to_everything(db, TENANT)
    heard: list[Any] = []
    db.subscribe(heard.append)
    sql.refuse_inserts(db, table, condition)
    with pytest.raises(psycopg.errors.RaiseException, match="refused by the test"):
        db.run(calls.create(new, status=status))
    counts = [sql.value(db, f"SELECT count(*) FROM {t}") for t in ("receipts", "receipt_events", "webhook_messages")]
    assert counts == [0, 0, 0]
    assert heard == []


def test_the_same_transition_succeeds_once_its_writes_can_be_made(db: Database) -> None:
    sql.subscribe_to_everything(db, TENANT)
    receipt = pending(db)
    sql.refuse_inserts(db, "webhook_messages", "NEW.event_type = 'receipt.running'")
    with pytest.raises(psycopg.errors.RaiseException):
        db.run(calls.claim(receipt.id, lease_s=30, actor="w"))
    sql.execute(db, "DROP TRIGGER refuse_insert ON webhook_messages")
    lease = db.run(calls.claim(receipt.id, lease_s=30, actor="w"))
    assert lease is not None and lease.receipt.attempt == 1  # the failed claim took no attempt
    assert snapshot(db, receipt.id)[1:] == (2, 1)


def test_a_sweep_whose_outbox_write_fails_settles_none_of_its_batch(db: Database) -> None:
    sql.subscribe_to_everything(db, TENANT)
    receipts = [pending(db) for _ in range(3)]
    sql.execute(db, "UPDATE receipts SET deadline_at = now() - interval '1 second'")
    before = [snapshot(db, r.id) for r in receipts]
    sql.refuse_inserts(db, "webhook_messages", f"NEW.receipt_id = '{receipts[1].id}'")
    with pytest.raises(psycopg.errors.RaiseException):
        db.run(sweep(republish_after_s=30))
    assert [snapshot(db, r.id) for r in receipts] == before


# -- database time -------------------------------------------------------------------------------


def test_a_claim_returns_the_time_left_by_the_databases_clock(db: Database) -> None:
    receipt = pending(db)
    sql.execute(db, "UPDATE receipts SET deadline_at = now() + interval '5 seconds' WHERE id = %(id)s", id=receipt.id)
    deadline = db.run(calls.load(receipt.id)).deadline_at  # type: ignore[union-attr]
    t0 = db_now(db)
    lease = db.run(calls.claim(receipt.id, lease_s=30, actor="w"))
    t1 = db_now(db)
    assert lease is not None
    assert (deadline - t1).total_seconds() <= lease.time_left_s <= (deadline - t0).total_seconds()
    assert lease.time_left_s == pytest.approx(
        (deadline - lease.receipt.started_at).total_seconds(), abs=1e-6)  # type: ignore[operator]
    assert 0 < lease.time_left_s <= 5


def test_a_call_past_its_deadline_by_the_databases_clock_is_not_claimed(db: Database) -> None:
    receipt = pending(db)
    sql.execute(db, "UPDATE receipts SET deadline_at = now() - interval '1 millisecond' WHERE id = %(id)s",
                id=receipt.id)
    assert db.run(calls.claim(receipt.id, lease_s=30, actor="w")) is None


def test_the_deadline_is_the_databases_now_plus_the_calls_timeout(db: Database) -> None:
    t0 = db_now(db)
    receipt, _ = db.run(calls.create(call(deadline_s=42.5)))
    t1 = db_now(db)
    assert t0 <= receipt.created_at <= t1
    assert receipt.deadline_at == receipt.created_at + timedelta(seconds=42.5)
    assert receipt.available_at == receipt.updated_at == receipt.created_at


def test_the_lease_is_the_databases_now_plus_the_lease(db: Database) -> None:
    receipt = pending(db)
    t0 = db_now(db)
    lease = db.run(calls.claim(receipt.id, lease_s=12.25, actor="w"))
    t1 = db_now(db)
    assert lease is not None
    claimed = lease.receipt
    assert claimed.started_at is not None and t0 <= claimed.started_at <= t1
    assert claimed.lease_expires_at == claimed.started_at + timedelta(seconds=12.25)
    assert claimed.updated_at == claimed.started_at
    assert db.run(calls.events(TENANT, receipt.id))[-1].at == claimed.started_at


def test_a_retry_is_due_at_the_databases_now_plus_its_delay(db: Database) -> None:
    receipt = running(db)
    t0 = db_now(db)
    again = db.run(calls.retry_later(receipt.id, 1, error("timeout", "slow", retryable=True), delay_s=7.5,
                                     published=True, actor="w"))
    t1 = db_now(db)
    assert again is not None
    assert t0 <= again.updated_at <= t1
    assert again.available_at == again.updated_at + timedelta(seconds=7.5)
    assert again.published_at == again.available_at


def test_a_finish_is_dated_by_the_databases_clock(db: Database) -> None:
    receipt = running(db)
    t0 = db_now(db)
    done = db.run(calls.finish(receipt.id, 1, Result("success", output=1), actor="w"))
    t1 = db_now(db)
    assert done is not None and done.finished_at is not None
    assert t0 <= done.finished_at <= t1
    assert done.updated_at == done.finished_at
