"""Completing an agent step's batch and resuming the run that waits for it are one transaction: if the
``batch.completed`` outbox row cannot be written (refused in PostgreSQL), neither happens."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from agents import batches as agent_batches
from receipts import states
from receipts.db import Database
from receipts.store import batches, calls, runs
from receipts.store.calls import Result
from tests.support import factories, sql
from tests.support.factories import TENANT


def test_a_completion_that_cannot_be_announced_neither_completes_the_batch_nor_resumes_the_run(
        db: Database) -> None:
    sql.subscribe_to_everything(db, TENANT)
    run, _ = db.run(runs.create(factories.run()))
    claimed = db.run(runs.claim(run.id, lease_s=30))
    assert claimed is not None
    step = factories.batch(1, metadata={"run_id": run.id})
    db.run(batches.open_batch(step, agent_batches.render))
    assert db.run(runs.wait_for(claimed.run, step.id, waiting=False)) is not None
    [receipt_id] = [entry.receipt_id for entry in step.entries]
    assert db.run(calls.claim(receipt_id, lease_s=30, actor="w")) is not None
    assert db.run(calls.finish(receipt_id, 1, Result("success", output={"ok": True}), actor="w")) is not None

    before = (db.run(batches.get(TENANT, step.id)), db.run(runs.get(TENANT, run.id)))
    assert before[0][0].status == "running" and before[1][0].waiting_batch_id == step.id
    sql.refuse_inserts(db, "webhook_messages", f"NEW.event_type = '{states.BATCH_COMPLETED}'")
    with pytest.raises(psycopg.errors.RaiseException, match="refused by the test"):
        db.run(agent_batches.complete(step.id))
    assert (db.run(batches.get(TENANT, step.id)), db.run(runs.get(TENANT, run.id))) == before

    sql.execute(db, "DROP TRIGGER refuse_insert ON webhook_messages")
    resumed = db.run(agent_batches.complete(step.id))
    assert resumed is not None and resumed.status == "pending"
    assert db.run(batches.get(TENANT, step.id))[0].status == "completed"


def test_a_release_waits_for_a_completer_in_the_middle_of_its_transaction(db: Database) -> None:
    # The lost wake-up: the completer finds the run still held (it cannot resume it) and commits only after
    # the advancer, releasing the run, looked at the batch and found it still running. The release must
    # wait for the completer's transaction, so that the advancer's next look sees the batch completed.
    run, _ = db.run(runs.create(factories.run()))
    claimed = db.run(runs.claim(run.id, lease_s=30))
    assert claimed is not None
    step = factories.batch(1, metadata={"run_id": run.id})
    db.run(batches.open_batch(step, agent_batches.render))
    [receipt_id] = [entry.receipt_id for entry in step.entries]
    db.run(calls.claim(receipt_id, lease_s=30, actor="w"))
    db.run(calls.finish(receipt_id, 1, Result("success", output={"ok": True}), actor="w"))

    completer = psycopg.connect(db.url, autocommit=False)  # the completer's transaction, held open
    try:
        completer.execute("SELECT 1 FROM batches WHERE id = %s FOR UPDATE", [step.id])
        completer.execute("UPDATE batches SET status = 'completed', completed_at = now() WHERE id = %s", [step.id])
        with ThreadPoolExecutor(1) as pool:
            released = pool.submit(db.run, runs.wait_for(claimed.run, step.id, waiting=False))
            sql.wait_until(db, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                               "AND query LIKE '%%FROM batches%%FOR UPDATE%%')")  # blocked on the batch's lock
            assert not released.done()
            completer.commit()
            assert released.result(timeout=30) is not None
    finally:
        completer.close()
    assert db.run(batches.get(TENANT, step.id))[0].completed  # what the advancer's next look now sees
