"""Retention (``toolrelay purge``): old finished receipts go with everything that hangs off them;
open receipts, young idempotency keys, undelivered webhooks and running batches stay.

Time is the database's: receipts are given ids and times of the past (ids lead with their creation
time), so no test waits for time to pass.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from ulid import ULID

from receipts.db import Database
from receipts.store import batches, calls
from receipts.store.batches import NewBatch
from receipts.store.calls import Entry, Result
from receipts.store.retention import Purged, purge
from tests.support import sql
from tests.support.factories import TENANT, call

DAY = 86400.0


def past_id(prefix: str, days: float) -> str:
    return f"{prefix}_{str(ULID.from_datetime(datetime.now(UTC) - timedelta(days=days))).lower()}"


def age(db: Database, receipt_id: str, *, created_days: float, finished_days: float | None = None) -> None:
    """Move a receipt's times into the past (its id already says when it was created)."""
    sql.execute(db, """UPDATE receipts SET created_at = now() - make_interval(secs => %(c)s),
                       updated_at = now() - make_interval(secs => %(f)s),
                       finished_at = CASE WHEN finished_at IS NOT NULL THEN now() - make_interval(secs => %(f)s) END
                       WHERE id = %(id)s""",
                id=receipt_id, c=created_days * DAY, f=(finished_days if finished_days is not None else 0) * DAY)


def finished(db: Database, *, days: float, finished_days: float | None = None, status: str = "success",
             **options: Any) -> str:
    """A receipt created ``days`` ago that ran and ended ``finished_days`` ago (default: as old)."""
    receipt_id = past_id("rcpt", days)
    db.run(calls.insert([Entry(call(**options), receipt_id=receipt_id)]))
    lease = db.run(calls.claim(receipt_id, lease_s=30, actor="w"))
    assert lease is not None
    db.run(calls.finish(receipt_id, 1, Result(status, output={"ok": True}), actor="w"))
    age(db, receipt_id, created_days=days, finished_days=days if finished_days is None else finished_days)
    return receipt_id


def open_receipt(db: Database, *, days: float) -> str:
    receipt_id = past_id("rcpt", days)
    db.run(calls.insert([Entry(call(), receipt_id=receipt_id)]))
    age(db, receipt_id, created_days=days)
    return receipt_id


def add_message(db: Database, receipt_id: str, status: str = "delivered", attempts: int = 2) -> str:
    message_id = f"msg_{receipt_id[-12:]}{status[:3]}"
    sql.execute(db, """INSERT INTO webhook_messages (id, tenant_id, endpoint_id, url, event_type, receipt_id, payload,
                       status, attempts, next_attempt_at, created_at, updated_at)
                       VALUES (%(id)s, %(t)s, NULL, 'http://127.0.0.1:9/h', 'receipt.succeeded', %(r)s, '{}',
                               %(s)s, %(n)s, now(), now(), now())""",
                id=message_id, t=TENANT, r=receipt_id, s=status, n=attempts)
    for _ in range(attempts):
        sql.execute(db, "INSERT INTO webhook_attempts (message_id, at, success) VALUES (%(m)s, now(), true)",
                    m=message_id)
    return message_id


def ids(db: Database, table: str) -> set[str]:
    return {row[0] for row in sql.rows(db, f"SELECT id FROM {table}")}


def test_old_finished_receipts_go_with_their_events_messages_and_attempts(db: Database) -> None:
    old = finished(db, days=40)
    failed = finished(db, days=35, status="failed")
    message = add_message(db, old)
    recent = finished(db, days=5)
    long_running = finished(db, days=40, finished_days=2)  # created long ago, finished recently
    still_open = open_receipt(db, days=60)
    events_before = sql.value(db, "SELECT count(*) FROM receipt_events WHERE receipt_id IN (%(a)s, %(b)s)",
                              a=old, b=failed)

    total = purge(db, older_than_s=30 * DAY)

    assert ids(db, "receipts") == {recent, long_running, still_open}
    assert total == Purged(receipts=2, events=events_before, messages=1, attempts=2)
    assert sql.value(db, "SELECT count(*) FROM receipt_events WHERE receipt_id IN (%(a)s, %(b)s)",
                     a=old, b=failed) == 0
    assert sql.value(db, "SELECT count(*) FROM webhook_messages WHERE id = %(m)s", m=message) == 0
    assert sql.value(db, "SELECT count(*) FROM webhook_attempts WHERE message_id = %(m)s", m=message) == 0
    assert sql.value(db, "SELECT count(*) FROM receipt_events WHERE receipt_id = %(r)s", r=recent) == 3


def test_an_open_receipt_is_never_deleted_whatever_its_age(db: Database) -> None:
    pending = open_receipt(db, days=400)
    running = open_receipt(db, days=400)
    assert db.run(calls.claim(running, lease_s=30, actor="w")) is not None
    waiting_id = past_id("rcpt", 400)
    db.run(calls.insert([Entry(call(), status="waiting", receipt_id=waiting_id)]))
    age(db, waiting_id, created_days=400)
    assert purge(db, older_than_s=0) == Purged()
    assert ids(db, "receipts") == {pending, running, waiting_id}


def test_idempotency_keys_are_honoured_for_24_hours_whatever_the_retention(db: Database) -> None:
    young_key = finished(db, days=0.5, finished_days=0.4, idempotency_key="young", request_hash="h1")
    old_key = finished(db, days=2, idempotency_key="old", request_hash="h2")
    no_key = finished(db, days=0.5, finished_days=0.4)
    total = purge(db, older_than_s=60)  # a minute: shorter than a day
    assert ids(db, "receipts") == {young_key}
    assert total.receipts == 2
    # The young key still replays; the purged one is free again (a new receipt, not an error).
    replay, replayed = db.run(calls.create(call(idempotency_key="young", request_hash="h1")))
    assert (replay.id, replayed) == (young_key, True)
    fresh, replayed = db.run(calls.create(call(idempotency_key="old", request_hash="h2")))
    assert fresh.id not in (old_key, no_key) and not replayed


def test_a_receipt_with_a_webhook_still_to_deliver_is_kept(db: Database) -> None:
    undelivered = finished(db, days=40)
    add_message(db, undelivered, status="pending", attempts=1)
    given_up = finished(db, days=40)
    add_message(db, given_up, status="failed", attempts=8)
    total = purge(db, older_than_s=30 * DAY)
    assert ids(db, "receipts") == {undelivered}
    assert (total.receipts, total.messages, total.attempts) == (1, 1, 8)


def open_batch(db: Database, receipt_ids: list[str], days: float) -> str:
    batch_id = past_id("batch", days)
    entries = [Entry(call(batch_id=batch_id, idempotency_key=f"{batch_id}:{i}"), receipt_id=receipt_id)
               for i, receipt_id in enumerate(receipt_ids)]
    db.run(batches.open_batch(NewBatch(id=batch_id, tenant_id=TENANT, trace_id="trace_b", format="openai_chat",
                                       idempotency_key=None, request_hash=None, max_result_chars=100, metadata={},
                                       webhook_url=None, entries=entries), lambda batch, receipts: []))
    return batch_id


def end(db: Database, receipt_id: str, days: float) -> None:
    assert db.run(calls.claim(receipt_id, lease_s=30, actor="w")) is not None
    db.run(calls.finish(receipt_id, 1, Result("success", output=1), actor="w"))
    age(db, receipt_id, created_days=days, finished_days=days)


def test_batches_go_once_all_their_receipts_have_and_a_running_batch_keeps_its_receipts(db: Database) -> None:
    done_calls = [past_id("rcpt", 40), past_id("rcpt", 40)]
    done = open_batch(db, done_calls, days=40)
    for receipt_id in done_calls:
        end(db, receipt_id, 40)
    db.run(batches.complete(done, lambda batch, receipts: [{"role": "tool"}]))
    sql.execute(db, "UPDATE batches SET created_at = now() - interval '40 days', "
                    "completed_at = now() - interval '40 days' WHERE id = %(id)s", id=done)
    add_message(db, done)  # its batch.completed webhook, delivered long ago
    half_calls = [past_id("rcpt", 40), past_id("rcpt", 40)]
    half = open_batch(db, half_calls, days=40)
    end(db, half_calls[0], 40)  # the other call is still pending: the batch is running

    total = purge(db, older_than_s=30 * DAY)

    assert ids(db, "batches") == {half}
    assert ids(db, "receipts") == set(half_calls)
    assert (total.receipts, total.batches, total.messages) == (2, 1, 1)


def test_a_purge_works_in_rounds_of_the_batch_size(db: Database) -> None:
    doomed = [finished(db, days=40) for _ in range(5)]
    kept = [open_receipt(db, days=40) for _ in range(2)]
    rounds: list[Purged] = []
    total = purge(db, older_than_s=30 * DAY, limit=2, progress=rounds.append)
    assert total.receipts == len(doomed)
    assert ids(db, "receipts") == set(kept)
    assert len(rounds) >= 3 and all(r.receipts <= 2 for r in rounds)
    assert sum(r.receipts for r in rounds) == 5
