"""Receipt operations: create-or-replay, compare-and-set claim, fenced finish, retry, cancel, results, reads.

Each operation is written once and run by either driver (``db.run(op)`` in workers, ``await
db.arun(op)`` in the gateway). Each transition is one statement (:mod:`receipts.store.statements`):
the state change, its line in the ``receipt_events`` timeline and the webhook outbox rows announcing
it commit together, and the committed receipt is announced to the database's listeners.

Two rules keep concurrent workers honest (DESIGN.md, guarantee 2):

* a claim is ``UPDATE ... WHERE status = 'pending'``: zero rows means somebody else has it;
* every later write is also ``WHERE attempt = :attempt``: the attempt number is a fencing token, so
  a worker whose lease was reclaimed cannot overwrite what the next attempt wrote.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from psycopg.types.json import Jsonb

from receipts import cursors, states
from receipts.db import Announce, Query, Steps, operation
from receipts.errors import IdempotencyMismatch, InvalidTransition, NotFound
from receipts.ids import new_id
from receipts.records import Event, Page, Receipt, ToolSpec
from receipts.store import statements as sql

LIST_KIND = "receipts"


# json.dumps(sort_keys=True, separators=(",", ":"), default=str), its encoder made once: the stored
# fingerprints are hashes of exactly these bytes.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def fingerprint(request: dict[str, Any], key: str | None = None) -> str:
    """A stable hash of a request body, to tell a replay from a different request under one key; keyed
    (HMAC-SHA256 with ``key``) where the body holds secrets the stored hash must tell nothing about."""
    canonical = _CANONICAL.encode(request).encode()
    if key:
        return hmac.new(key.encode(), canonical, hashlib.sha256).hexdigest()
    return hashlib.sha256(canonical).hexdigest()


@dataclass(frozen=True, slots=True)
class NewCall:
    """What the gateway (or a system tool) asks the store to accept."""

    tenant_id: str
    tool: ToolSpec
    arguments: Any
    deadline_s: float
    trace_id: str | None = None
    call_id: str | None = None
    parent_id: str | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    webhook_url: str | None = None
    batch_id: str | None = None
    approval_timeout_s: float | None = None  # set: the call waits this long for a person's approval
    secret_input: str | None = None  # the secret arguments, encrypted (``arguments`` has them masked)
    traceparent: str | None = None  # the W3C trace context it is accepted under (tracing continues it)


@dataclass(frozen=True, slots=True)
class Entry:
    """A call to insert, the status it starts in, its error when it starts failed, and the id its receipt
    gets if it is new. Once inserted, it is that call as its batch's opener sees it (a
    :class:`~receipts.records.BatchCall`): its receipt's id, tool, status, error, timeout and queue."""

    call: NewCall
    status: str = states.PENDING
    error: dict[str, Any] | None = None
    receipt_id: str = field(default_factory=lambda: new_id("rcpt"))

    @property
    def id(self) -> str:
        return self.receipt_id

    @property
    def tool(self) -> str:
        return self.call.tool.name

    @property
    def timeout_s(self) -> float:
        return self.call.tool.timeout_s

    @property
    def queue(self) -> str:
        return self.call.tool.queue

    @property
    def terminal(self) -> bool:
        return self.status in states.TERMINAL


@dataclass(frozen=True, slots=True)
class Result:
    """How an attempt (or a client-run call) ended: the status to record and its output or error."""

    status: str
    output: Any = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    """A claimed attempt: the receipt as claimed, how long its call has left (database time), and its
    secret arguments, encrypted (the receipt's ``input`` has them masked; only a claim reads them)."""

    receipt: Receipt
    time_left_s: float
    secret_input: str | None = None


def error(code: str, message: str, *, retryable: bool = False, retry_after_ms: int | None = None,
          details: dict[str, Any] | None = None) -> dict[str, Any]:
    """An ``error`` object in the receipt's closed vocabulary."""
    assert code in states.ERROR_CODES, code
    return {"code": code, "message": message, "retryable": retryable, "retry_after_ms": retry_after_ms,
            "details": details or {}}


def _json(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


def _transition(statement: str, params: dict[str, Any], *, actor: str,
                detail: dict[str, Any] | None = None) -> Steps[tuple[Any, ...] | None]:
    """Run one transition statement; its row (None: it matched nothing), announced once committed."""
    params.update(actor=actor, detail=Jsonb(detail or {}))
    row = yield Query(statement, params)
    if row is not None:
        yield Announce(Receipt.from_values(row), row[-1])
    return row  # type: ignore[no-any-return]


def _receipt(row: tuple[Any, ...] | None) -> Receipt | None:
    return None if row is None else Receipt.from_values(row)


# -- writing ------------------------------------------------------------------------------------


def insert_params(entries: list[Entry]) -> dict[str, Any]:
    """The INSERT's parameter: the new calls as one JSON array, an object per call (statements.NEW_CALL)."""
    rows = []
    for entry in entries:
        call, spec = entry.call, entry.call.tool
        rows.append({
            "id": entry.receipt_id, "tenant_id": call.tenant_id, "trace_id": call.trace_id or new_id("trace"),
            "call_id": call.call_id, "parent_id": call.parent_id, "tool": spec.name, "kind": spec.kind,
            "status": entry.status, "input": call.arguments, "error": entry.error, "max_attempts": spec.max_attempts,
            "idempotency_key": call.idempotency_key, "request_hash": call.request_hash, "metadata": call.metadata,
            "webhook_url": call.webhook_url, "effect": spec.effect, "idempotent": spec.idempotent,
            "timeout_s": spec.timeout_s, "queue": spec.queue, "deadline_s": call.deadline_s,
            "batch_id": call.batch_id,
            "approval_timeout_s": call.approval_timeout_s if entry.status == states.WAITING else None,
            "traceparent": call.traceparent, "secret_input": call.secret_input,
        })
    return {"rows": Jsonb(rows)}


Accepted = tuple[Receipt, bool]


@operation
def insert(entries: list[Entry], *, actor: str = "api") -> Steps[list[Accepted | IdempotencyMismatch]]:
    """Accept calls in one statement; for each, in order, ``(receipt, replayed)`` or the refusal of a key
    reused with a different request (:class:`IdempotencyMismatch`).

    A call whose idempotency key was used before gets the receipt that key made (``replayed``), so
    concurrent duplicates under one key create exactly one receipt: the unique index decides, and
    ``ON CONFLICT DO NOTHING`` lets the losers read the winner.
    """
    rows = yield Query(sql.INSERT_SQL, {**insert_params(entries), "actor": actor}, fetch="all")
    return (yield from accepted(entries, rows, actor=actor))


def accepted(entries: list[Entry], rows: list[tuple[Any, ...]], *,
             actor: str) -> Steps[list[Accepted | IdempotencyMismatch]]:
    """What an INSERT of ``entries`` that returned ``rows`` accepted: each entry's receipt, new or replayed
    (a row of NULLs, which a statement may return to say it ran but inserted none, is left out)."""
    rows = [row for row in rows if row[0] is not None]
    created = {row[0]: Receipt.from_values(row) for row in rows}
    for row in rows:
        yield Announce(created[row[0]], row[-1])
    missing = [entry.call for entry in entries if entry.receipt_id not in created]
    replays: dict[tuple[str, str], Receipt] = {}
    if missing:
        found = yield Query(sql.REPLAY, {"tenant_ids": [call.tenant_id for call in missing],
                                         "keys": [call.idempotency_key for call in missing]}, fetch="all")
        replays = {(r.tenant_id, r.idempotency_key or ""): r for r in map(Receipt.from_values, found)}
    results: list[Accepted | IdempotencyMismatch] = []
    for entry in entries:
        call = entry.call
        if entry.receipt_id in created:
            results.append((created[entry.receipt_id], False))
            continue
        existing = replays.get((call.tenant_id, call.idempotency_key or ""))
        if existing is None:  # the conflicting receipt was purged in between: accept this one after all
            results.append((yield from insert([entry], actor=actor).steps)[0])
        elif existing.request_hash != call.request_hash:
            results.append(IdempotencyMismatch(receipt_id=existing.id))
        else:
            results.append((existing, True))
    return results


@operation
def create_many(new_calls: list[NewCall], *, status: str = states.PENDING,
                actor: str = "api") -> Steps[list[Accepted | IdempotencyMismatch]]:
    """:func:`insert` of calls that all start in ``status``."""
    return (yield from insert([Entry(call, status) for call in new_calls], actor=actor).steps)


@operation
def create(call: NewCall, *, status: str = states.PENDING, actor: str = "api") -> Steps[Accepted]:
    """Accept a call, or find the receipt its idempotency key already made: ``(receipt, replayed)``.

    Raises:
        IdempotencyMismatch: the key was used before with a different request.
    """
    (result,) = yield from create_many([call], status=status, actor=actor).steps
    if isinstance(result, IdempotencyMismatch):
        raise result
    return result


@operation
def claim(receipt_id: str, *, lease_s: float, actor: str) -> Steps[Lease | None]:
    """pending -> running, bumping ``attempt`` and taking a lease; None for a duplicate delivery.

    A receipt whose retry is not yet due (``available_at`` in the future) or whose deadline has
    passed is not claimed: the early message is dropped, the sweeper settles the late one.
    """
    row = yield from _transition(sql.CLAIM_SQL, {"id": receipt_id, "lease_s": lease_s},
                                 actor=actor)
    if row is None:
        return None
    return Lease(Receipt.from_values(row), row[-2], row[-3])


@operation
def finish(receipt_id: str, attempt: int, result: Result, *, actor: str,
           from_status: str = states.RUNNING) -> Steps[Receipt | None]:
    """running (or ``from_status``) -> success|failed|partially_succeeded, fenced by ``attempt``;
    None if fenced out."""
    assert states.can_move(from_status, result.status), (from_status, result.status)
    params = {"id": receipt_id, "attempt": attempt, "target": result.status, "before": from_status,
              "output": _json(result.output), "error": _json(result.error)}
    detail = {"error": result.error} if result.error is not None else None
    return _receipt((yield from _transition(sql.FINISH_SQL, params, actor=actor,
                                            detail=detail)))


@operation
def retry_later(receipt_id: str, attempt: int, err: dict[str, Any], *, delay_s: float, published: bool,
                actor: str) -> Steps[Receipt | None]:
    """running -> pending with the retry due in ``delay_s`` (database time), fenced by ``attempt``.

    ``published`` says whether the caller will send the message itself (with a countdown); if
    not, ``published_at`` stays empty and the sweeper enqueues the retry when it is due.
    """
    params = {"id": receipt_id, "attempt": attempt, "error": Jsonb(err), "delay_s": delay_s, "published": published}
    detail = {"error": err, "retry_in_s": round(delay_s, 3)}
    return _receipt((yield from _transition(sql.RETRY_SQL, params, actor=actor,
                                            detail=detail)))


@operation
def complete_waiting(tenant_id: str, receipt_id: str, result: Result, *, actor: str) -> Steps[Receipt]:
    """waiting -> success|failed for a client-run (function) tool.

    Raises:
        NotFound: no such receipt for this tenant.
        InvalidTransition: the receipt is not waiting (a result was already posted, or it expired).
    """
    params = {"id": receipt_id, "tenant_id": tenant_id, "target": result.status,
              "output": _json(result.output), "error": _json(result.error)}
    detail = {"error": result.error} if result.error is not None else None
    receipt = _receipt((yield from _transition(sql.COMPLETE_WAITING_SQL, params,
                                               actor=actor, detail=detail)))
    if receipt is not None:
        return receipt
    current = yield from get(tenant_id, receipt_id).steps
    if current.status == states.WAITING:  # past its deadline; the sweeper is about to expire it
        raise InvalidTransition(f"the deadline for this result passed at {current.deadline_at.isoformat()}",
                                status=current.status)
    raise InvalidTransition(f"receipt is {current.status}, not waiting", status=current.status)


@operation
def cancel(tenant_id: str, receipt_id: str, *, actor: str = "api") -> Steps[Receipt]:
    """Any non-terminal state -> canceled. A running worker's later finish is fenced out.

    Raises:
        NotFound: no such receipt for this tenant.
        InvalidTransition: the receipt is already terminal.
    """
    params = {"id": receipt_id, "tenant_id": tenant_id, "error": Jsonb(error("canceled", "canceled by request"))}
    receipt = _receipt((yield from _transition(sql.CANCEL_SQL, params, actor=actor)))
    if receipt is not None:
        return receipt
    current = yield from get(tenant_id, receipt_id).steps
    raise InvalidTransition(f"receipt is already {current.status}", status=current.status)


@operation
def cancel_batch(tenant_id: str, batch_id: str, *, reason: str, actor: str) -> Steps[list[Receipt]]:
    """Cancel every open call of a batch (the run it belongs to ended); the calls it canceled."""
    params = {"batch_id": batch_id, "tenant_id": tenant_id, "error": Jsonb(error("canceled", reason)),
              "actor": actor, "detail": Jsonb({})}
    rows = yield Query(sql.CANCEL_BATCH_SQL, params, fetch="all")
    canceled = [Receipt.from_values(row) for row in rows]
    for receipt, row in zip(canceled, rows, strict=True):
        yield Announce(receipt, row[-1])
    return canceled


# -- reading ------------------------------------------------------------------------------------


@operation
def attempt_claimed_by(receipt_id: str, actor: str) -> Steps[int | None]:
    """The attempt of ``receipt_id`` that ``actor`` claimed last (None: it claimed none).

    For finishing an attempt on behalf of a process that can no longer do it (the worker's main
    process, when the hard time limit killed the pool process that ran it): the finish is then
    fenced by that attempt like any other.
    """
    row = yield Query(sql.CLAIMED_BY, {"id": receipt_id, "actor": actor})
    return None if row is None else int(row[0])


@operation
def get_many(wanted: list[tuple[str | None, str]]) -> Steps[list[Receipt | None]]:
    """Receipts by ``(tenant_id, receipt_id)``, in order, in one statement; None where there is no such
    receipt for that tenant (a ``None`` tenant: whatever its tenant, for workers and the sweeper)."""
    rows = yield Query(sql.GET_MANY, {"ids": sorted({receipt_id for _, receipt_id in wanted})}, fetch="all",
                       prepared=False)  # its best plan depends on how many receipts there are (see Query)
    found = {receipt.id: receipt for receipt in map(Receipt.from_values, rows)}
    results: list[Receipt | None] = []
    for tenant_id, receipt_id in wanted:
        receipt = found.get(receipt_id)
        results.append(receipt if receipt is not None and tenant_id in (None, receipt.tenant_id) else None)
    return results


@operation
def load(receipt_id: str) -> Steps[Receipt | None]:
    """A receipt by id, whatever its tenant (for workers and the sweeper)."""
    return (yield from get_many([(None, receipt_id)]).steps)[0]


@operation
def get(tenant_id: str, receipt_id: str) -> Steps[Receipt]:
    """A tenant's receipt. Another tenant's id is NotFound, exactly like an unknown one."""
    receipt = (yield from get_many([(tenant_id, receipt_id)]).steps)[0]
    if receipt is None:
        raise NotFound(f"no receipt {receipt_id}")
    return receipt


@operation
def list_receipts(tenant_id: str, *, trace_id: str | None = None, status: str | None = None,
                  tool: str | None = None, parent_id: str | None = None, limit: int = 50,
                  cursor: str | None = None, tools: Collection[str] | None = None) -> Steps[Page]:
    """Newest first, ``limit`` at a time; ``next_cursor`` continues where the page ended. With ``tools``,
    only the receipts of those tools (an API key's scope).

    Raises:
        InvalidCursor: ``cursor`` is not a ``next_cursor`` of this list.
    """
    position = cursors.check(LIST_KIND, cursor)
    values = {"trace_id": trace_id, "status": status, "tool": tool, "parent_id": parent_id}
    filters = tuple(name for name in sql.LIST_FILTERS if values[name] is not None)
    params: dict[str, Any] = {"tenant_id": tenant_id, "limit": limit + 1, **{k: values[k] for k in filters}}
    if position is not None:
        params["before_id"] = position[0]
    if tools is not None:
        params["tools"] = sorted(tools)
    rows = yield Query(sql.list_sql(filters, after=position is not None, scoped=tools is not None), params,
                       fetch="all")
    return cursors.page(LIST_KIND, [Receipt.from_values(row) for row in rows[:limit]], lambda r: (r.id,),
                        more=len(rows) > limit)


@operation
def events(tenant_id: str, receipt_id: str) -> Steps[list[Event]]:
    """The timeline of a tenant's receipt, oldest first.

    Raises:
        NotFound: no such receipt for this tenant.
    """
    rows = yield Query(sql.EVENTS, {"id": receipt_id, "tenant_id": tenant_id}, fetch="all")
    if not rows:
        raise NotFound(f"no receipt {receipt_id}")
    return [Event.from_values(row) for row in rows]
