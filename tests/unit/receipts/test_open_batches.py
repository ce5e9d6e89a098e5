"""Opening many batches in one statement: each is opened, replayed or refused on its own, as if alone."""

from __future__ import annotations

import dataclasses
from typing import Any

from agents import batches as agent_batches
from receipts import states
from receipts.db import Announce, Database
from receipts.errors import IdempotencyMismatch
from receipts.records import BatchCall
from receipts.store import batches, calls
from receipts.store.batches import NewBatch
from receipts.store.calls import Entry, error
from tests.support import factories, sql


def keyed(size: int, key: str, request_hash: str) -> NewBatch:
    return dataclasses.replace(factories.batch(size), idempotency_key=key, request_hash=request_hash)


def stored_receipts(db: Database, batch_id: str) -> list[str]:
    return [row[0] for row in sql.rows(db, "SELECT id FROM receipts WHERE batch_id = %(id)s ORDER BY id", id=batch_id)]


def test_batches_opened_together_each_get_their_own_receipts_in_call_order(db: Database) -> None:
    news = [factories.batch(size) for size in (1, 3, 2)]
    results = db.run(batches.open_many(news, agent_batches.render))
    for new, result in zip(news, results, strict=True):
        assert not isinstance(result, BaseException)
        batch, opened, replayed = result
        assert not replayed and batch.id == new.id and batch.status == "running"
        assert [c.id for c in opened] == [e.receipt_id for e in new.entries] == batch.receipt_ids
        assert {c.status for c in opened} == {states.PENDING}
        assert stored_receipts(db, new.id) == sorted(batch.receipt_ids)
        stored, receipts = db.run(batches.get(new.tenant_id, new.id))
        assert stored == batch and {r.batch_id for r in receipts} == {new.id}
        assert [fields(c) for c in opened] == [fields(r) for r in receipts]  # what was opened is what is stored
    assert sql.value(db, "SELECT count(*) FROM receipt_events") == 6  # each receipt's creation, once


def fields(call: BatchCall) -> tuple[Any, ...]:
    return call.id, call.tool, call.status, call.error, call.timeout_s, call.queue, call.terminal


def test_the_batch_is_announced_and_a_call_that_starts_failed_as_its_receipt(db: Database) -> None:
    sql.subscribe_to_everything(db, factories.TENANT)
    new = factories.batch(2)
    new = dataclasses.replace(new, entries=[new.entries[0], Entry(new.entries[1].call, states.FAILED,
                                                                  error("not_found", "no tool named 'nope'"),
                                                                  new.entries[1].receipt_id)])
    heard: list[Announce] = []
    db.subscribe(heard.append)
    batch, (pending, failed), _replayed = db.run(batches.open_batch(new, agent_batches.render))
    assert (pending.status, failed.status, failed.error and failed.error["code"]) == ("pending", "failed", "not_found")
    assert [announced.subject for announced in heard] == [batch, db.run(calls.get(new.tenant_id, failed.id))]
    # The statement queued one webhook message (receipt.failed, to the endpoint): the dispatcher is nudged.
    assert [announced.messages for announced in heard] == [1, 1]


def test_a_key_twice_in_one_statement_opens_one_batch_and_the_other_is_its_replay(db: Database) -> None:
    first, second = keyed(2, "step-1", "h1"), keyed(2, "step-1", "h1")
    (opened, replay) = db.run(batches.open_many([first, second], agent_batches.render))
    assert not isinstance(opened, BaseException) and not isinstance(replay, BaseException)
    assert opened[2] is False and replay[2] is True
    assert replay[0].id == opened[0].id == first.id
    assert [fields(c) for c in replay[1]] == [fields(c) for c in opened[1]]
    assert stored_receipts(db, second.id) == []
    assert sql.value(db, "SELECT count(*) FROM batches") == 1


def test_a_key_reused_for_another_request_is_refused_alone(db: Database) -> None:
    db.run(batches.open_batch(keyed(1, "step-1", "h1"), agent_batches.render))
    fresh, reused = factories.batch(1), keyed(1, "step-1", "another")
    results = db.run(batches.open_many([fresh, reused], agent_batches.render))
    assert isinstance(results[1], IdempotencyMismatch)
    assert not isinstance(results[0], BaseException) and results[0][0].id == fresh.id
    assert stored_receipts(db, reused.id) == [] and len(stored_receipts(db, fresh.id)) == 1


def test_a_batch_whose_calls_all_start_failed_completes_while_the_others_run(db: Database) -> None:
    running = factories.batch(2)
    failing = factories.batch(2)
    failing = dataclasses.replace(failing, entries=[
        Entry(entry.call, states.FAILED, error("not_found", "no tool named 'nope'"), entry.receipt_id)
        for entry in failing.entries])
    done, still = db.run(batches.open_many([failing, running], agent_batches.render))
    assert not isinstance(done, BaseException) and not isinstance(still, BaseException)
    assert done[0].status == "completed" and len(done[0].messages or []) == 2
    assert {r.status for r in done[1]} == {states.FAILED}
    assert still[0].status == "running"
    assert db.run(batches.get(running.tenant_id, running.id))[0].status == "running"
