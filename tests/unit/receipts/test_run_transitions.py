"""Batches and runs announce in the transaction that changes them: when a write of it fails in
PostgreSQL (a timeline line or an outbox row refused by a trigger, as a full disk would), the batch,
its calls and the run stay exactly as they were, and the same change goes through once the write can
be made."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from receipts import states
from receipts.db import Database, Op
from receipts.records import Batch, Receipt, Run
from receipts.store import batches, calls, runs
from receipts.store.batches import NewBatch
from receipts.store.calls import Result
from tests.support import factories, sql
from tests.support.factories import TENANT


def render(batch: Batch, receipts: list[Receipt]) -> list[dict[str, Any]]:
    return [{"role": "tool", "content": receipt.id} for receipt in receipts]


def open_batch(db: Database, new: NewBatch | None = None) -> tuple[str, list[str]]:
    """Open ``new`` (a batch of two calls by default): its id and its calls'."""
    new = new or factories.batch()
    db.run(batches.open_batch(new, render))
    return new.id, [entry.receipt_id for entry in new.entries]


def end(db: Database, receipt_id: str) -> None:
    assert db.run(calls.claim(receipt_id, lease_s=30, actor="w")) is not None
    assert db.run(calls.finish(receipt_id, 1, Result("success", output=1), actor="w")) is not None


def messages(db: Database, subject: str) -> int:
    return int(sql.value(db, "SELECT count(*) FROM webhook_messages WHERE receipt_id = %(id)s", id=subject))


def batch_state(db: Database, batch_id: str) -> tuple[Any, ...]:
    """The batch's row, its calls' rows and timelines, and every outbox row about any of them."""
    batch, receipts = db.run(batches.get(TENANT, batch_id))
    ids = [batch_id, *(r.id for r in receipts)]
    return (batch, receipts,
            sql.value(db, "SELECT count(*) FROM receipt_events WHERE receipt_id = ANY(%(ids)s)", ids=ids),
            sql.value(db, "SELECT count(*) FROM webhook_messages WHERE receipt_id = ANY(%(ids)s)", ids=ids))


def test_a_batch_whose_calls_cannot_all_be_written_is_not_opened(db: Database) -> None:
    sql.subscribe_to_everything(db, TENANT)
    new = factories.batch(3)
    sql.refuse_inserts(db, "receipt_events", f"NEW.receipt_id = '{new.entries[1].receipt_id}'")
    with pytest.raises(psycopg.errors.RaiseException, match="refused by the test"):
        db.run(batches.open_batch(new, render))
    counts = [sql.value(db, f"SELECT count(*) FROM {t}") for t in ("batches", "receipts", "receipt_events",
                                                                    "webhook_messages")]
    assert counts == [0, 0, 0, 0]


def test_a_batch_whose_completion_cannot_be_announced_stays_running(db: Database) -> None:
    sql.subscribe_to_everything(db, TENANT)
    batch_id, receipt_ids = open_batch(db)
    for receipt_id in receipt_ids:
        end(db, receipt_id)
    before = batch_state(db, batch_id)
    sql.refuse_inserts(db, "webhook_messages", f"NEW.event_type = '{states.BATCH_COMPLETED}'")
    with pytest.raises(psycopg.errors.RaiseException, match="refused by the test"):
        db.run(batches.complete(batch_id, render))
    assert batch_state(db, batch_id) == before
    assert before[0].status == "running" and before[0].messages is None

    sql.execute(db, "DROP TRIGGER refuse_insert ON webhook_messages")
    completed = db.run(batches.complete(batch_id, render))
    assert completed is not None and completed.status == "completed"
    assert messages(db, batch_id) == 1


def test_canceling_a_batch_whose_outbox_write_fails_cancels_none_of_its_calls(db: Database) -> None:
    sql.subscribe_to_everything(db, TENANT)
    batch_id, receipt_ids = open_batch(db, factories.batch(3))
    before = batch_state(db, batch_id)
    heard: list[Any] = []
    db.subscribe(heard.append)
    sql.refuse_inserts(db, "webhook_messages", f"NEW.receipt_id = '{receipt_ids[2]}'")
    with pytest.raises(psycopg.errors.RaiseException, match="refused by the test"):
        db.run(calls.cancel_batch(TENANT, batch_id, reason="the run ended", actor="w"))
    assert batch_state(db, batch_id) == before
    assert heard == []


# -- runs ----------------------------------------------------------------------------------------


def new_run(db: Database) -> Run:
    run, replayed = db.run(runs.create(factories.run()))
    assert not replayed
    return run


def running_run(db: Database) -> Run:
    claimed = db.run(runs.claim(new_run(db).id, lease_s=30))
    assert claimed is not None
    return claimed.run


STEP_BATCH = "batch_step"  # the batch of a run's tool step (each test has a database of its own)


def with_a_tool_step(db: Database) -> Run:
    """A running run whose tool step opened its batch."""
    run = running_run(db)
    open_batch(db, factories.batch(1, batch_id=STEP_BATCH, metadata={"run_id": run.id}))
    return run


def waiting_on_its_batch(db: Database) -> Run:
    """A run released until its tool step's batch completes (not yet marked as waiting for a person)."""
    released = db.run(runs.wait_for(with_a_tool_step(db), STEP_BATCH, waiting=False))
    assert released is not None and released.status == "running"
    return released


def past_its_deadline(db: Database) -> Run:
    run = running_run(db)
    sql.execute(db, "UPDATE runs SET deadline_at = now() - interval '1 second' WHERE id = %(id)s", id=run.id)
    return run


def run_state(db: Database, run_id: str) -> tuple[Run, list[Any], int]:
    """The run's row, its steps, and its outbox rows."""
    run, steps = db.run(runs.get(TENANT, run_id))
    return run, steps, messages(db, run_id)


RUN_TRANSITIONS: dict[str, tuple[Callable[[Database], Run], Callable[[Run], Op[Any]], str]] = {
    # name: (the run before, the transition, the event it announces)
    "wait for a person": (with_a_tool_step, lambda r: runs.wait_for(r, STEP_BATCH, waiting=True), "run.waiting"),
    "a call starts waiting for a person": (
        waiting_on_its_batch, lambda r: runs.set_waiting(r.id, STEP_BATCH, waiting=True), "run.waiting"),
    "succeed": (running_run, lambda r: runs.finish(r, states.SUCCESS, output="done"), "run.succeeded"),
    "fail": (running_run, lambda r: runs.finish(r, states.FAILED, error=calls.error("tool_error", "no")),
             "run.failed"),
    "cancel pending": (new_run, lambda r: runs.cancel(TENANT, r.id), "run.canceled"),
    "cancel running": (running_run, lambda r: runs.cancel(TENANT, r.id), "run.canceled"),
    "expire": (past_its_deadline, lambda r: runs.sweep(republish_after_s=30), "run.failed"),
}


@pytest.mark.parametrize("name", list(RUN_TRANSITIONS))
def test_a_run_transition_whose_outbox_write_fails_changes_nothing(db: Database, name: str) -> None:
    before_state, transition, event = RUN_TRANSITIONS[name]
    sql.subscribe_to_everything(db, TENANT)
    run = before_state(db)
    before = run_state(db, run.id)
    sql.refuse_inserts(db, "webhook_messages", f"NEW.event_type = '{event}'")
    with pytest.raises(psycopg.errors.RaiseException, match="refused by the test"):
        db.run(transition(run))
    assert run_state(db, run.id) == before

    sql.execute(db, "DROP TRIGGER refuse_insert ON webhook_messages")
    db.run(transition(run))
    after, _, sent = run_state(db, run.id)
    assert after.status != before[0].status and sent == before[2] + 1
