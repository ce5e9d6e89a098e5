"""Retention: deleting finished receipts (``toolrelay purge``), with everything that hangs off them.

A receipt goes once it has been terminal longer than the retention period, with its timeline
events, its webhook messages and their delivery attempts; a completed batch goes once every one of
its receipts has. What is kept, whatever the period:

* an open receipt (pending, running, waiting), and a terminal one whose batch is still running (the
  batch needs every receipt to render its messages);
* a receipt or batch with an idempotency key created less than :data:`IDEMPOTENCY_KEPT_S` ago (24 h):
  a client retrying within a day must get the same receipt, not a second execution;
* a receipt or batch with a webhook message still to be delivered.

The work is done in rounds, each one statement (one transaction) over at most ``limit`` rows taken
in id order from where the previous round ended. Ids sort by creation time, and nothing finishes
before it is created, so only ids created before the cutoff are looked at: a purge walks the old
part of the table once, by primary key, and never scans the rest. What is deleted is decided by the
database's times (``finished_at``, ``created_at`` against ``now()``); the ids only narrow the walk.
They are made by the hosts that accept calls, so the walk reaches :data:`CLOCK_SLACK_S` past the
cutoff: a host whose clock runs ahead of the database's (by up to that) cannot hide a receipt from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime, timedelta

from ulid import ULID

from receipts import states
from receipts.db import Database, Query, Steps, operation

IDEMPOTENCY_KEPT_S = 24 * 3600
CLOCK_SLACK_S = 3600

_TERMINAL = "(" + ", ".join(f"'{status}'" for status in sorted(states.TERMINAL)) + ")"
_OLD = "now() - make_interval(secs => %(older_than_s)s)"
_KEYS_KEPT = f"now() - make_interval(secs => {IDEMPOTENCY_KEPT_S})"


def _delete_with_messages(doomed_sql: str, table: str, events: bool) -> str:
    """One round: the window of ids, the rows of it to delete (``doomed_sql``, over ``x`` joined to the
    window), their webhook messages and attempts (and timeline events), all deleted in one statement."""
    event_ctes = ("events AS (DELETE FROM receipt_events e WHERE e.receipt_id IN (SELECT id FROM doomed) "
                  "RETURNING 1),") if events else ""
    event_count = "(SELECT count(*) FROM events)" if events else "0"
    return f"""
WITH win AS (
    SELECT id FROM {table} WHERE id > %(after)s AND id < %(bound)s ORDER BY id LIMIT %(limit)s
), doomed AS (
    SELECT x.id FROM {table} x JOIN win ON win.id = x.id
    WHERE {doomed_sql.strip()}
      AND NOT EXISTS (SELECT 1 FROM webhook_messages m WHERE m.receipt_id = x.id AND m.status = 'pending')
), msgs AS (
    SELECT m.id FROM webhook_messages m WHERE m.receipt_id IN (SELECT id FROM doomed)
), attempts AS (
    DELETE FROM webhook_attempts a WHERE a.message_id IN (SELECT id FROM msgs) RETURNING 1
), messages AS (
    DELETE FROM webhook_messages m WHERE m.id IN (SELECT id FROM msgs) RETURNING 1
), {event_ctes} gone AS (
    DELETE FROM {table} x WHERE x.id IN (SELECT id FROM doomed) RETURNING 1
)
SELECT (SELECT max(id) FROM win), (SELECT count(*) FROM gone), {event_count},
       (SELECT count(*) FROM messages), (SELECT count(*) FROM attempts)"""


PURGE_RECEIPTS = _delete_with_messages(f"""
    x.status IN {_TERMINAL} AND x.finished_at < {_OLD}
      AND (x.idempotency_key IS NULL OR x.created_at < {_KEYS_KEPT})
      AND (x.batch_id IS NULL OR EXISTS (SELECT 1 FROM batches b WHERE b.id = x.batch_id AND b.status = 'completed'))
""", "receipts", events=True)
PURGE_BATCHES = _delete_with_messages(f"""
    x.status = 'completed' AND x.completed_at < {_OLD}
      AND (x.idempotency_key IS NULL OR x.created_at < {_KEYS_KEPT})
      AND NOT EXISTS (SELECT 1 FROM receipts r WHERE r.id = ANY(x.receipt_ids))
""", "batches", events=False)
CUTOFF = f"SELECT {_OLD}"


@dataclass(frozen=True, slots=True)
class Purged:
    """What a purge (or one round of it) deleted."""

    receipts: int = 0
    events: int = 0
    messages: int = 0
    attempts: int = 0
    batches: int = 0

    def __add__(self, other: Purged) -> Purged:
        return Purged(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


@dataclass(frozen=True, slots=True)
class Round:
    """One round's work: what it deleted, and the last id it looked at (None: nothing was left)."""

    purged: Purged
    last_id: str | None


def id_bound(prefix: str, before: datetime) -> str:
    """An id that sorts after every ``prefix`` id made before ``before`` (plus the clock slack) by any host:
    ULIDs lead with their time."""
    return f"{prefix}_{str(ULID.from_datetime(before + timedelta(seconds=CLOCK_SLACK_S)))[:10].lower()}"


@operation
def cutoff(older_than_s: float) -> Steps[datetime]:
    """The database's now minus ``older_than_s``: what finished before it is old enough to go."""
    row = yield Query(CUTOFF, {"older_than_s": older_than_s})
    return row[0]  # type: ignore[no-any-return]


@operation
def purge_round(table: str, *, older_than_s: float, bound: str, after: str = "", limit: int = 1000) -> Steps[Round]:
    """Delete what is old enough among the next ``limit`` ids of ``table`` (``receipts`` or ``batches``)
    after ``after`` and before ``bound``; one statement, so one transaction."""
    statement = {"receipts": PURGE_RECEIPTS, "batches": PURGE_BATCHES}[table]
    row = yield Query(statement, {"older_than_s": older_than_s, "bound": bound, "after": after, "limit": limit})
    last_id, gone, events, messages, attempts = row
    if table == "receipts":
        purged = Purged(receipts=gone, events=events, messages=messages, attempts=attempts)
    else:
        purged = Purged(batches=gone, messages=messages, attempts=attempts)
    return Round(purged, last_id)


def purge(db: Database, *, older_than_s: float, limit: int = 1000,
          progress: Callable[[Purged], None] | None = None) -> Purged:
    """Delete every receipt terminal for longer than ``older_than_s`` (with its events, messages and
    attempts), then every completed batch with none of its receipts left: ``limit`` rows per round,
    each round its own transaction, ``progress`` told what each round deleted. Returns the totals."""
    if older_than_s < 0 or limit < 1:
        raise ValueError("older_than_s must be >= 0 and limit >= 1")
    before = db.run(cutoff(older_than_s))
    total = Purged()
    for table, prefix in (("receipts", "rcpt"), ("batches", "batch")):
        after, bound = "", id_bound(prefix, before)
        while True:
            done = db.run(purge_round(table, older_than_s=older_than_s, bound=bound, after=after, limit=limit))
            total += done.purged
            if progress is not None and done.purged != Purged():
                progress(done.purged)
            if done.last_id is None:
                break
            after = done.last_id
    return total
