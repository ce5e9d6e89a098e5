"""Completing an agent step's batch and resuming the run that waits for it are one transaction: if the
``batch.completed`` outbox row cannot be written (refused in PostgreSQL), neither happens."""

from __future__ import annotations

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
