"""Batches: the tool calls of one agent step, opened together, completed once every call is terminal.

Opening batches is one statement: each batch's row and a receipt per call (``receipts.batch_id``),
with their timeline and outbox rows, so the calls of a step exist together or not at all, and a
retried step (the same idempotency key) finds the batch its first try opened instead of opening
another. Completing one happens when its
last call ends, whoever ends it (a worker, the sweeper, a client posting a function tool's result):
under the batch's row lock, once all its receipts are terminal, the messages for the model are
rendered (by the caller's ``render``: the vendors' formats live above this package), stored, and
announced (webhook ``batch.completed``, and a notification for requests waiting on the batch) in
the same transaction. Whoever ends the last call completes the batch, since each looks after its
own write has committed; the sweeper completes any batch whose completer died in between.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from receipts import states
from receipts.db import Announce, Query, Steps, operation, subop, transaction
from receipts.errors import IdempotencyMismatch, NotFound
from receipts.records import BATCH_COLUMNS, Batch, BatchCall, Receipt
from receipts.store import calls
from receipts.store import statements as sql
from receipts.store.calls import Entry
from receipts.store.statements import COLUMNS
from receipts.webhooks.announce import announce

Render = Callable[[Batch, list[Receipt]], list[dict[str, Any]]]

_BATCH = ", ".join(BATCH_COLUMNS)
# New batches, any number in one statement: ``%(batches)s`` is a JSON array of them, one object per
# batch with these fields (read back with jsonb_to_recordset, like the calls' rows).
NEW_BATCH = (("id", "text"), ("tenant_id", "text"), ("trace_id", "text"), ("format", "text"),
             ("receipt_ids", "text[]"), ("idempotency_key", "text"), ("request_hash", "text"),
             ("max_result_chars", "int"), ("metadata", "jsonb"), ("webhook_url", "text"))
OPEN = f"""
INSERT INTO batches ({_BATCH})
SELECT n.id, n.tenant_id, n.trace_id, n.format, 'running', n.receipt_ids, n.idempotency_key, n.request_hash,
       n.max_result_chars, n.metadata, n.webhook_url, NULL, now(), now(), NULL
FROM jsonb_to_recordset(%(batches)s) AS n({", ".join(f"{name} {kind}" for name, kind in NEW_BATCH)})
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
RETURNING id, created_at"""
# The batches and their calls in one statement: a batch's calls are inserted only if the batch is (a
# replay inserts neither). Each row starts with the id and creation time of a batch it opened, then
# the id of one of that batch's new receipts (NULL when none of its calls is new) and how
# many webhook messages the statement queued; a batch not opened has none. The rest of each receipt is
# what the caller asked for: it is not read back (its timeline and outbox rows are written from it).
OPEN_WITH_CALLS = sql.transition(sql.insert(where="WHERE u.batch_id IN (SELECT id FROM b)"), announce=True,
                                 detail=sql.ERROR_DETAIL, first=f"b AS ({OPEN})",
                                 source="b LEFT JOIN r ON r.batch_id = b.id",
                                 leading="b.id AS opened_id, b.created_at AS opened_at", returning="r.id")
BY_KEY = f"SELECT {_BATCH} FROM batches WHERE tenant_id = %(tenant_id)s AND idempotency_key = %(key)s"
GET = f"SELECT {_BATCH} FROM batches WHERE id = %(id)s"
LOCK = f"SELECT {_BATCH} FROM batches WHERE id = %(id)s AND status = 'running' FOR UPDATE"
RECEIPTS = f"SELECT {COLUMNS} FROM receipts WHERE id = ANY(%(ids)s)"
COMPLETE = f"""
UPDATE batches SET status = 'completed', messages = %(messages)s, completed_at = now(), updated_at = now()
WHERE id = %(id)s RETURNING {_BATCH}"""
# Running batches none of whose receipts is still open: their completer died before it looked.
ORPHANED = f"""
SELECT b.id FROM batches b
WHERE b.status = 'running' AND NOT EXISTS (
    SELECT 1 FROM receipts r WHERE r.id = ANY(b.receipt_ids) AND r.status NOT IN
    ({", ".join(f"'{s}'" for s in sorted(states.TERMINAL))}))
ORDER BY b.created_at LIMIT %(limit)s"""


@dataclass(frozen=True, slots=True)
class NewBatch:
    """What a caller asks to open: the batch's fields, and the calls' entries in the model's order."""

    id: str
    tenant_id: str
    trace_id: str
    format: str
    idempotency_key: str | None
    request_hash: str | None
    max_result_chars: int
    metadata: dict[str, Any]
    webhook_url: str | None
    entries: list[Entry]


def _batch(row: tuple[Any, ...]) -> Batch:
    return Batch(*row)


Opened = tuple[Batch, Sequence[BatchCall], bool]


def _batch_row(new: NewBatch) -> dict[str, Any]:
    return {"id": new.id, "tenant_id": new.tenant_id, "trace_id": new.trace_id, "format": new.format,
            "receipt_ids": [entry.receipt_id for entry in new.entries], "idempotency_key": new.idempotency_key,
            "request_hash": new.request_hash, "max_result_chars": new.max_result_chars, "metadata": new.metadata,
            "webhook_url": new.webhook_url}


@operation
def open_many(news: list[NewBatch], render: Render, *,
              actor: str = "api") -> Steps[list[Opened | IdempotencyMismatch]]:
    """Open each of ``news`` with a receipt per entry (each entry's call carries its batch's id), all in
    one statement: for each, in order, ``(batch, its calls in call order, replayed)``, or the refusal
    of a key used before for a different request (:class:`IdempotencyMismatch`). A batch whose calls
    all start terminal completes at once.

    Concurrent duplicates under one key open one batch (the unique index decides, in one statement
    too): the others read it back as replays.

    What was opened is announced once committed, with how many webhook messages the statement queued:
    each batch, and each call that starts failed (a model's mistake) as its whole receipt, read back
    for that (it ended: the listeners count and log it). A call just accepted has nothing else for a
    listener.
    """
    params = {**calls.insert_params([entry for new in news for entry in new.entries]), "actor": actor,
              "batches": Jsonb([_batch_row(new) for new in news])}
    rows = yield Query(OPEN_WITH_CALLS, params, fetch="all")
    opened_at: dict[str, datetime] = {}
    inserted: set[str] = set()
    for batch_id, at, receipt_id, _queued in rows:
        opened_at[batch_id] = at
        inserted.add(receipt_id)
    queued = rows[0][3] if rows else 0  # the webhook messages the statement queued (each row says it)
    results: list[Opened | IdempotencyMismatch] = []
    ended: list[str] = []
    for new in news:
        if new.id not in opened_at:  # the key opened a batch before: that one is the answer
            existing = _batch((yield Query(BY_KEY, {"tenant_id": new.tenant_id, "key": new.idempotency_key})))
            if existing.request_hash != new.request_hash:
                results.append(IdempotencyMismatch(receipt_id=existing.id))
            else:
                results.append((existing, (yield from _receipts(existing)), True))
            continue
        if not inserted.issuperset(entry.receipt_id for entry in new.entries):
            # Its batch is new, and so is every idempotency key its calls derive from the batch's id.
            raise RuntimeError(f"a call of the batch {new.id}, just opened, was not inserted")
        batch = opened(new, at=opened_at[new.id])
        yield Announce(batch, queued)
        starting_failed = [entry.receipt_id for entry in new.entries if entry.terminal]
        ended.extend(starting_failed)
        if len(starting_failed) == len(new.entries):
            batch = (yield from subop(complete(batch.id, render))) or batch
        results.append((batch, new.entries, False))
    if ended:
        for receipt in (yield from calls.get_many([(None, receipt_id) for receipt_id in ended]).steps):
            if receipt is not None:  # (purged in the meantime: nothing to announce)
                yield Announce(receipt, queued)
    return results


@operation
def open_batch(new: NewBatch, render: Render, *, actor: str = "api") -> Steps[Opened]:
    """:func:`open_many` of one batch.

    Raises:
        IdempotencyMismatch: the batch's key was used before for a different request.
    """
    (result,) = yield from open_many([new], render, actor=actor).steps
    if isinstance(result, IdempotencyMismatch):
        raise result
    return result


def opened(new: NewBatch, *, at: datetime) -> Batch:
    """The row OPEN stores for ``new`` at ``at`` (the statement's now(), which its receipts share)."""
    return Batch(id=new.id, tenant_id=new.tenant_id, trace_id=new.trace_id, format=new.format, status="running",
                 receipt_ids=[entry.receipt_id for entry in new.entries], idempotency_key=new.idempotency_key,
                 request_hash=new.request_hash, max_result_chars=new.max_result_chars, metadata=new.metadata,
                 webhook_url=new.webhook_url, messages=None, created_at=at, updated_at=at, completed_at=None)


def _receipts(batch: Batch) -> Steps[list[Receipt]]:
    rows = yield Query(RECEIPTS, {"ids": batch.receipt_ids}, fetch="all", prepared=False)  # as calls.get_many
    found = {receipt.id: receipt for receipt in map(Receipt.from_values, rows)}
    return [found[receipt_id] for receipt_id in batch.receipt_ids if receipt_id in found]


@operation
def get(tenant_id: str, batch_id: str) -> Steps[tuple[Batch, list[Receipt]]]:
    """A tenant's batch with its receipts in call order; another tenant's is NotFound, like an unknown one."""
    row = yield Query(GET, {"id": batch_id})
    if row is None or row[1] != tenant_id:
        raise NotFound(f"no batch {batch_id}")
    batch = _batch(row)
    return batch, (yield from _receipts(batch))


def _complete(batch: Batch, receipts: list[Receipt], render: Render) -> Steps[Batch | None]:
    if len(receipts) != len(batch.receipt_ids) or not all(receipt.terminal for receipt in receipts):
        return None
    completed = _batch((yield Query(COMPLETE, {"id": batch.id, "messages": Jsonb(render(batch, receipts))})))
    yield from announce(tenant_id=batch.tenant_id, event=states.BATCH_COMPLETED, subject=batch.id,
                        data=completed.to_api(), at=completed.completed_at, webhook_url=batch.webhook_url)
    return completed


@transaction
def complete(batch_id: str, render: Render) -> Steps[Batch | None]:
    """Complete the batch if every call of it is terminal now: the completed batch, or None (still
    running, or completed already)."""
    row = yield Query(LOCK, {"id": batch_id})
    if row is None:
        return None
    batch = _batch(row)
    return (yield from _complete(batch, (yield from _receipts(batch)), render))


@operation
def orphaned(limit: int = 100) -> Steps[list[str]]:
    """Running batches whose calls are all terminal (the sweeper completes them)."""
    return [row[0] for row in (yield Query(ORPHANED, {"limit": limit}, fetch="all"))]
