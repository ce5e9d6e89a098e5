"""The receipt store: create-or-replay, compare-and-set claim, fenced finish, retry, cancel, queries.

Each public method is one atomic operation in its own transaction: the state change, its line in the
``receipt_events`` timeline and the webhook outbox rows announcing it commit together.

Two rules keep concurrent workers honest (DESIGN.md, guarantee 2):

* a claim is ``UPDATE ... WHERE status = 'pending'``: zero rows means somebody else has it;
* every later write is also ``WHERE attempt = :attempt``: the attempt number is a fencing token, so
  a worker whose lease was reclaimed cannot overwrite what the next attempt wrote.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb
from sqlalchemy import Connection, and_, insert, select, update

from receipts import outbox, states
from receipts import pg_statements as pg
from receipts.db import Database, dialect_insert, utcnow
from receipts.errors import IdempotencyMismatch, InvalidTransition, NotFound
from receipts.ids import new_id
from receipts.records import Event, Page, Receipt, ToolSpec, iso
from receipts.tables import receipt_events, receipts

# Called after each committed transition with the receipt and how many webhook messages it queued.
Listener = Callable[[Receipt, int], None]
JSON_COLUMNS = frozenset({"input", "output", "error", "metadata"})


def fingerprint(request: dict[str, Any]) -> str:
    """A stable hash of a request body, to tell a replay from a different request under one key."""
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


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


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ended: the status to record and its output or error."""

    status: str
    output: Any = None
    error: dict[str, Any] | None = None


def error(code: str, message: str, *, retryable: bool = False, retry_after_ms: int | None = None,
          details: dict[str, Any] | None = None) -> dict[str, Any]:
    """An ``error`` object in the receipt's closed vocabulary."""
    assert code in states.ERROR_CODES, code
    return {
        "code": code,
        "message": message,
        "retryable": retryable,
        "retry_after_ms": retry_after_ms,
        "details": details or {},
    }


def _pg_values(values: dict[str, Any]) -> dict[str, Any]:
    """A row's values as psycopg parameters: JSON columns wrapped as jsonb."""
    return {k: Jsonb(v) if k in JSON_COLUMNS and v is not None else v for k, v in values.items()}


def encode_cursor(receipt_id: str) -> str:
    return base64.urlsafe_b64encode(receipt_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The receipt id a cursor from :func:`encode_cursor` points at.

    Raises:
        ValueError: not such a cursor (a lenient decode would turn garbage into an empty page).
    """
    padded = cursor + "=" * (-len(cursor) % 4)
    receipt_id = base64.b64decode(padded.encode(), altchars=b"-_", validate=True).decode()
    if not receipt_id.startswith("rcpt_"):
        raise ValueError("not a receipt cursor")
    return receipt_id


class ReceiptStore:
    """Receipts and their timeline, on a :class:`~receipts.db.Database`."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._listeners: list[Listener] = []
        self._pg = db.dialect == "postgresql"  # the hot transitions take one round trip there

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(receipt, messages_queued)`` in this process after every committed transition."""
        self._listeners.append(listener)

    def _announce(self, receipt: Receipt, messages: int) -> None:
        for listener in self._listeners:
            listener(receipt, messages)

    # -- writing -----------------------------------------------------------------------------

    def _record(self, conn: Connection, receipt: Receipt, before: str | None, actor: str,
                now: datetime, detail: dict[str, Any] | None = None) -> int:
        """Append the transition to the timeline and queue its webhook messages; returns how many."""
        conn.execute(
            insert(receipt_events).values(
                receipt_id=receipt.id,
                at=now,
                from_status=before,
                to_status=receipt.status,
                attempt=receipt.attempt,
                actor=actor,
                detail=detail or {},
            )
        )
        event_type = states.EVENT_TYPES.get(receipt.status)
        return outbox.emit(conn, receipt, event_type, now) if event_type is not None else 0

    def _pg_transition(self, sql: str, params: dict[str, Any], *, before: str | None, target: str, actor: str,
                       now: datetime, detail: dict[str, Any] | None = None) -> Receipt | None:
        """Run one statement of ``pg_statements`` (transition + timeline + outbox) in autocommit."""
        row = self.db.statement(sql, self._pg_params(params, before=before, target=target, actor=actor, now=now,
                                                     detail=detail))
        return self._pg_recorded(row)

    @staticmethod
    def _pg_params(params: dict[str, Any], *, before: str | None, target: str, actor: str, now: datetime,
                   detail: dict[str, Any] | None = None) -> dict[str, Any]:
        """``params`` plus what the timeline and outbox parts of a ``pg_statements`` statement take."""
        assert before is None or states.can_move(before, target), (before, target)
        event_type = states.EVENT_TYPES.get(target)
        params.update(
            now=now,
            before=before,
            actor=actor,
            detail=Jsonb(detail or {}),
            event_type=event_type,
            event_pattern=f"%,{event_type},%",
            timestamp=iso(now),
        )
        return params

    def _pg_recorded(self, row: tuple[Any, ...] | None) -> Receipt | None:
        """The receipt a ``pg_statements`` statement returned (None: it matched nothing), announced."""
        if row is None:
            return None
        values = dict(zip(pg.ROW, row, strict=True))
        receipt = Receipt.from_row(values)
        self._announce(receipt, values["outbox_messages"])
        return receipt

    def create(self, call: NewCall, *, status: str = states.PENDING, actor: str = "api") -> tuple[Receipt, bool]:
        """Accept a call, or find the receipt its idempotency key already made.

        Returns ``(receipt, replayed)``. Concurrent duplicates under one key create exactly one
        receipt: the unique index decides, ``ON CONFLICT DO NOTHING`` lets the loser read the winner.

        Raises:
            IdempotencyMismatch: the key was used before with a different request.
        """
        now = utcnow()
        values = self._new_receipt(call, status, now)
        if self._pg:
            sql = pg.CREATE_ANNOUNCED if status in states.EVENT_TYPES else pg.CREATE_PENDING
            created = self._pg_transition(sql, _pg_values(values), before=None, target=status, actor=actor, now=now)
            if created is not None:
                return created, False
            return self._replay_read(call), True
        with self.db.transaction() as conn:
            stmt = dialect_insert(conn)(receipts).values(**values)
            if call.idempotency_key is not None:
                stmt = stmt.on_conflict_do_nothing(index_elements=["tenant_id", "idempotency_key"])
            row = conn.execute(stmt.returning(*receipts.c)).mappings().first()
            if row is None:
                return self._replay(conn, call), True
            receipt = Receipt.from_row(row)
            messages = self._record(conn, receipt, None, actor, now)
        self._announce(receipt, messages)
        return receipt, False

    async def create_pending(self, call: NewCall, *, actor: str = "api") -> tuple[Receipt, bool]:
        """:meth:`create` of a pending call, for an event loop: the same statement and guarantees.

        With the database's async pool open (PostgreSQL, see ``Database.open_async``), the INSERT is
        awaited on the loop itself; elsewhere :meth:`create` runs in a thread. A pending receipt
        queues no webhook messages, so its listeners do nothing that could block the loop.
        """
        if not (self._pg and self.db.async_ready):
            return await asyncio.to_thread(self.create, call, actor=actor)
        now = utcnow()
        params = self._pg_params(_pg_values(self._new_receipt(call, states.PENDING, now)), before=None,
                                 target=states.PENDING, actor=actor, now=now)
        created = self._pg_recorded(await self.db.astatement(pg.CREATE_PENDING, params))
        if created is not None:
            return created, False
        return await asyncio.to_thread(self._replay_read, call), True

    def _replay_read(self, call: NewCall) -> Receipt:
        with self.db.read() as conn:
            return self._replay(conn, call)

    @staticmethod
    def _new_receipt(call: NewCall, status: str, now: datetime) -> dict[str, Any]:
        """The row of a newly accepted call."""
        spec = call.tool
        return {
            "id": new_id("rcpt"),
            "tenant_id": call.tenant_id,
            "trace_id": call.trace_id or new_id("trace"),
            "call_id": call.call_id,
            "parent_id": call.parent_id,
            "tool": spec.name,
            "kind": spec.kind,
            "status": status,
            "input": call.arguments,
            "output": None,
            "error": None,
            "attempt": 0,
            "max_attempts": spec.max_attempts,
            "idempotency_key": call.idempotency_key,
            "request_hash": call.request_hash,
            "metadata": call.metadata,
            "webhook_url": call.webhook_url,
            "effect": spec.effect,
            "idempotent": spec.idempotent,
            "timeout_s": spec.timeout_s,
            "queue": spec.queue,
            "created_at": now,
            "updated_at": now,
            "started_at": None,
            "finished_at": None,
            "deadline_at": now + timedelta(seconds=call.deadline_s),
            "available_at": now,
            "published_at": now if status == states.PENDING else None,
            "lease_expires_at": None,
        }

    def _replay(self, conn: Connection, call: NewCall) -> Receipt:
        """The receipt an earlier request with this idempotency key created, if it was the same request."""
        row = conn.execute(
            select(receipts).where(receipts.c.tenant_id == call.tenant_id,
                                   receipts.c.idempotency_key == call.idempotency_key)
        ).mappings().one()
        existing = Receipt.from_row(row)
        if existing.request_hash != call.request_hash:
            raise IdempotencyMismatch(receipt_id=existing.id)
        return existing

    def _move(self, receipt_id: str, before: str, target: str, *, where: Iterable[Any],
              values: dict[str, Any], actor: str, detail: dict[str, Any] | None = None,
              now: datetime | None = None) -> Receipt | None:
        """Move one receipt ``before -> target`` if ``where`` holds; None when it did not."""
        assert states.can_move(before, target), (before, target)
        now = now or utcnow()
        with self.db.transaction() as conn:
            row = conn.execute(
                update(receipts)
                .where(receipts.c.id == receipt_id, receipts.c.status == before, *where)
                .values(status=target, updated_at=now, **values)
                .returning(*receipts.c)
            ).mappings().first()
            if row is None:
                return None
            receipt = Receipt.from_row(row)
            messages = self._record(conn, receipt, before, actor, now, detail)
        self._announce(receipt, messages)
        return receipt

    def claim(self, receipt_id: str, *, lease_s: float, actor: str, now: datetime | None = None) -> Receipt | None:
        """pending -> running, bumping ``attempt`` and taking a lease; None for a duplicate delivery.

        A receipt whose retry is not yet due (``available_at`` in the future) or whose deadline has
        passed is not claimed: the early message is dropped, the sweeper settles the late one.
        """
        now = now or utcnow()
        if self._pg:
            params = {"id": receipt_id, "lease_expires_at": now + timedelta(seconds=lease_s),
                      "due_by": now + timedelta(seconds=1)}
            return self._pg_transition(pg.CLAIM_SQL, params, before=states.PENDING, target=states.RUNNING,
                                       actor=actor, now=now)
        return self._move(
            receipt_id,
            states.PENDING,
            states.RUNNING,
            where=[
                receipts.c.available_at <= now + timedelta(seconds=1),
                receipts.c.deadline_at > now,
            ],
            values={
                "attempt": receipts.c.attempt + 1,
                "lease_expires_at": now + timedelta(seconds=lease_s),
                "started_at": now,
            },
            actor=actor,
            now=now,
        )

    def finish(self, receipt_id: str, attempt: int, outcome: Outcome, *, actor: str,
               from_status: str = states.RUNNING) -> Receipt | None:
        """running -> success|failed|partially_succeeded, fenced by ``attempt``; None if fenced out."""
        now = utcnow()
        detail = {"error": outcome.error} if outcome.error is not None else None
        if self._pg:
            params = {"id": receipt_id, "attempt": attempt, "target": outcome.status,
                      "output": None if outcome.output is None else Jsonb(outcome.output),
                      "error": None if outcome.error is None else Jsonb(outcome.error)}
            return self._pg_transition(pg.FINISH_SQL, params, before=from_status, target=outcome.status,
                                       actor=actor, now=now, detail=detail)
        return self._move(
            receipt_id,
            from_status,
            outcome.status,
            where=[receipts.c.attempt == attempt],
            values={"output": outcome.output, "error": outcome.error, "finished_at": now,
                    "lease_expires_at": None},
            actor=actor,
            detail=detail,
            now=now,
        )

    def retry_later(self, receipt_id: str, attempt: int, err: dict[str, Any], *, delay_s: float,
                    published: bool, actor: str, now: datetime | None = None) -> Receipt | None:
        """running -> pending with the retry due in ``delay_s``, fenced by ``attempt``.

        ``published`` says whether the caller will send the message itself (with a countdown); if
        not, ``published_at`` stays empty and the sweeper enqueues the retry when it is due.
        ``now`` lets the sweeper schedule on the clock of its pass, so the same pass re-sends it.
        """
        now = now or utcnow()
        due = now + timedelta(seconds=delay_s)
        detail = {"error": err, "retry_in_s": round(delay_s, 3)}
        if self._pg:
            params = {"id": receipt_id, "attempt": attempt, "error": Jsonb(err), "available_at": due,
                      "published_at": due if published else None}
            return self._pg_transition(pg.RETRY_SQL, params, before=states.RUNNING, target=states.PENDING,
                                       actor=actor, now=now, detail=detail)
        return self._move(
            receipt_id,
            states.RUNNING,
            states.PENDING,
            where=[receipts.c.attempt == attempt],
            values={"error": err, "available_at": due, "published_at": due if published else None,
                    "lease_expires_at": None},
            actor=actor,
            detail=detail,
            now=now,
        )

    def complete_waiting(self, tenant_id: str, receipt_id: str, outcome: Outcome, *, actor: str) -> Receipt:
        """waiting -> success|failed for a client-run (function) tool.

        Raises:
            NotFound: no such receipt for this tenant.
            InvalidTransition: the receipt is not waiting (a result was already posted, or it expired).
        """
        now = utcnow()
        detail = {"error": outcome.error} if outcome.error is not None else None
        receipt = self._move(
            receipt_id,
            states.WAITING,
            outcome.status,
            where=[receipts.c.tenant_id == tenant_id, receipts.c.deadline_at > now],
            values={"output": outcome.output, "error": outcome.error, "finished_at": now},
            actor=actor,
            detail=detail,
            now=now,
        )
        if receipt is None:
            current = self.get(tenant_id, receipt_id)
            if current.status == states.WAITING:  # past its deadline; the sweeper is about to expire it
                raise InvalidTransition(f"the deadline for this result passed at {current.deadline_at.isoformat()}",
                                        status=current.status)
            raise InvalidTransition(f"receipt is {current.status}, not waiting", status=current.status)
        return receipt

    def cancel(self, tenant_id: str, receipt_id: str, *, actor: str = "api") -> Receipt:
        """Any non-terminal state -> canceled. A running worker's later finish is fenced out.

        Raises:
            NotFound: no such receipt for this tenant.
            InvalidTransition: the receipt is already terminal.
        """
        current = self.get(tenant_id, receipt_id)
        if current.terminal:
            raise InvalidTransition(f"receipt is already {current.status}", status=current.status)
        err = error("canceled", "canceled by request")
        receipt = self._move(
            receipt_id,
            current.status,
            states.CANCELED,
            where=[receipts.c.tenant_id == tenant_id, receipts.c.attempt == current.attempt],
            values={"error": err, "finished_at": utcnow(), "lease_expires_at": None},
            actor=actor,
        )
        if receipt is None:
            return self.cancel(tenant_id, receipt_id, actor=actor)  # it moved meanwhile: look again
        return receipt

    # -- reading -----------------------------------------------------------------------------

    def load(self, receipt_id: str) -> Receipt | None:
        """A receipt by id, whatever its tenant (for workers and the sweeper)."""
        with self.db.read() as conn:
            row = conn.execute(select(receipts).where(receipts.c.id == receipt_id)).mappings().first()
        return Receipt.from_row(row) if row else None

    def get(self, tenant_id: str, receipt_id: str) -> Receipt:
        """A tenant's receipt. Another tenant's id is NotFound, exactly like an unknown one."""
        with self.db.read() as conn:
            row = conn.execute(
                select(receipts).where(receipts.c.id == receipt_id, receipts.c.tenant_id == tenant_id)
            ).mappings().first()
        if row is None:
            raise NotFound(f"no receipt {receipt_id}")
        return Receipt.from_row(row)

    def list(self, tenant_id: str, *, trace_id: str | None = None, status: str | None = None,
             tool: str | None = None, parent_id: str | None = None, limit: int = 50,
             cursor: str | None = None) -> Page:
        """Newest first, ``limit`` at a time; ``next_cursor`` continues where the page ended."""
        c = receipts.c
        conditions = [c.tenant_id == tenant_id]
        for column, value in ((c.trace_id, trace_id), (c.status, status), (c.tool, tool), (c.parent_id, parent_id)):
            if value is not None:
                conditions.append(column == value)
        if cursor:
            conditions.append(c.id < decode_cursor(cursor))
        with self.db.read() as conn:
            rows = conn.execute(
                select(receipts).where(and_(*conditions)).order_by(c.id.desc()).limit(limit + 1)
            ).mappings().all()
        items = [Receipt.from_row(row) for row in rows[:limit]]
        next_cursor = encode_cursor(items[-1].id) if len(rows) > limit else None
        return Page(items=items, next_cursor=next_cursor)

    def events(self, tenant_id: str, receipt_id: str) -> builtins.list[Event]:
        """The timeline of a tenant's receipt, oldest first."""
        self.get(tenant_id, receipt_id)
        with self.db.read() as conn:
            rows = conn.execute(
                select(receipt_events)
                .where(receipt_events.c.receipt_id == receipt_id)
                .order_by(receipt_events.c.id)
            ).mappings().all()
        return [Event.from_row(row) for row in rows]
