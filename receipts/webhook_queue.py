"""The dispatcher's side of the outbox: claim due messages in batches, record their attempts in bulk.

A claim is one conditional UPDATE that sets ``locked_until`` (a lease) on up to ``limit`` due messages
and returns them. On PostgreSQL the rows are picked with ``FOR UPDATE SKIP LOCKED``, so dispatchers
running side by side take disjoint batches without waiting on each other; SQLite serializes writers
(``BEGIN IMMEDIATE``), which gives the same guarantee. A dispatcher that dies keeps its messages only
until the lease runs out; then another one claims them again (at-least-once).

Recording writes every attempt of a batch with one multi-row INSERT and moves each message on with
an UPDATE fenced by the lease it was claimed with: if the lease ran out and another dispatcher took
the message, the late result is logged as an attempt but does not overwrite the newer state.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, or_, select, update

from receipts.db import Database, utcnow
from receipts.records import iso
from receipts.tables import tenants, webhook_attempts, webhook_endpoints, webhook_messages
from receipts.webhook_records import PENDING, Claimed, Settled
from receipts.webhook_secrets import tokens

MAX_REASON = 1000


class DeliveryQueue:
    """Due messages for dispatchers. ``disable_after_s``: how long an endpoint may fail before it is disabled."""

    def __init__(self, db: Database, *, disable_after_s: float) -> None:
        self.db = db
        self.disable_after = timedelta(seconds=disable_after_s)

    def claim(self, limit: int, *, lease_s: float, now: datetime | None = None) -> list[Claimed]:
        """Lease up to ``limit`` due messages (oldest due first) with everything needed to send them."""
        now = now or utcnow()
        lease = now + timedelta(seconds=lease_s)
        m = webhook_messages.c
        due = (
            select(m.id)
            .where(m.status == PENDING, m.next_attempt_at <= now, or_(m.locked_until.is_(None), m.locked_until <= now))
            .order_by(m.next_attempt_at)
            .limit(limit)
        )
        with self.db.transaction() as conn:
            if conn.dialect.name == "postgresql":
                due = due.with_for_update(skip_locked=True)
            rows = conn.execute(
                update(webhook_messages)
                .where(m.id.in_(due.scalar_subquery()))
                .values(locked_until=lease)
                .returning(m.id, m.tenant_id, m.endpoint_id, m.url, m.event_type, m.receipt_id, m.payload, m.attempts)
            ).mappings().all()
            if not rows:
                return []
            endpoint_ids = {row["endpoint_id"] for row in rows if row["endpoint_id"] is not None}
            tenant_ids = {row["tenant_id"] for row in rows if row["endpoint_id"] is None}
            e = webhook_endpoints.c
            endpoints = {
                row["id"]: row
                for row in conn.execute(
                    select(e.id, e.url, e.enabled, e.disabled_reason, e.secrets).where(e.id.in_(endpoint_ids))
                ).mappings()
            } if endpoint_ids else {}
            t = tenants.c
            rings = {
                row.id: row.webhook_secrets
                for row in conn.execute(select(t.id, t.webhook_secrets).where(t.id.in_(tenant_ids)))
            } if tenant_ids else {}
        return [self._claimed(row, endpoints, rings, lease, now) for row in rows]

    @staticmethod
    def _claimed(row: Any, endpoints: dict[str, Any], rings: dict[str, Any], lease: datetime,
                 now: datetime) -> Claimed:
        refusal = None
        secrets: tuple[str, ...] = ()
        if row["endpoint_id"] is not None:
            endpoint = endpoints.get(row["endpoint_id"])
            if endpoint is None:
                url, refusal = "", "not sent: the endpoint was deleted"
            else:
                url, secrets = endpoint["url"], tokens(list(endpoint["secrets"]), now)
                if not endpoint["enabled"]:
                    refusal = f"not sent: the endpoint is disabled ({endpoint['disabled_reason']})"
        else:
            url, secrets = row["url"], tokens(list(rings.get(row["tenant_id"]) or []), now)
        if refusal is None and not secrets:
            refusal = ("not sent: the tenant has no default webhook secret (create one with POST /v1/webhook-secret)"
                       if row["endpoint_id"] is None else "not sent: the endpoint has no valid signing secret")
        return Claimed(id=row["id"], tenant_id=row["tenant_id"], endpoint_id=row["endpoint_id"], url=url,
                       event_type=row["event_type"], receipt_id=row["receipt_id"], payload=row["payload"],
                       attempts=row["attempts"], lease=lease, secrets=secrets, refusal=refusal)

    def release_all(self) -> int:
        """Drop every lease: for a single process that owns the database, coming back after a crash."""
        m = webhook_messages.c
        with self.db.transaction() as conn:
            result = conn.execute(update(webhook_messages).where(m.status == PENDING, m.locked_until.is_not(None))
                                  .values(locked_until=None))
        return int(result.rowcount or 0)

    def record(self, results: Sequence[Settled], now: datetime | None = None) -> None:
        """Write the attempts, move the messages on (fenced by their lease) and update endpoint health."""
        if not results:
            return
        now = now or utcnow()
        m = webhook_messages.c
        with self.db.transaction() as conn:
            # With RETURNING, SQLAlchemy sends an executemany as batched multi-row INSERTs ("insertmanyvalues")
            # from one cached statement; without it the driver would make one protocol round per attempt.
            conn.execute(webhook_attempts.insert().returning(webhook_attempts.c.id), [
                {"message_id": r.message_id, "endpoint_id": r.endpoint_id, "at": r.at, "success": r.success,
                 "status_code": r.status_code, "latency_ms": r.latency_ms, "response": r.response, "error": r.error}
                for r in results
            ])
            # Finished messages of one claim share their lease, status and (mostly) attempt count: one
            # UPDATE per such group; messages to retry each have their own due time: one executemany.
            groups: dict[tuple[str, int, datetime], list[str]] = defaultdict(list)
            retries = []
            for r in results:
                if r.next_attempt_at is None:
                    groups[(r.status, r.attempts, r.lease)].append(r.message_id)
                else:
                    retries.append({"b_id": r.message_id, "b_lease": r.lease, "b_status": r.status,
                                    "b_attempts": r.attempts, "b_next": r.next_attempt_at})
            for (status, attempts, lease), ids in groups.items():
                conn.execute(
                    update(webhook_messages).where(m.id.in_(ids), m.locked_until == lease)
                    .values(status=status, attempts=attempts, next_attempt_at=None, locked_until=None, updated_at=now)
                )
            if retries:
                conn.execute(
                    update(webhook_messages)
                    .where(m.id == bindparam("b_id"), m.locked_until == bindparam("b_lease"))
                    .values(status=bindparam("b_status"), attempts=bindparam("b_attempts"),
                            next_attempt_at=bindparam("b_next"), locked_until=None, updated_at=now),
                    retries,
                )
            self._health(conn, results, now)

    def _health(self, conn: Any, results: Sequence[Settled], now: datetime) -> None:
        """Clear the failure streak of endpoints that answered 2xx; start it, or disable, for the others."""
        e = webhook_endpoints.c
        ok = {r.endpoint_id for r in results if r.endpoint_id and r.health == "ok"}
        gone = {r.endpoint_id: r for r in results if r.endpoint_id and r.health == "gone"}
        last_failure = {r.endpoint_id: r for r in results if r.endpoint_id and r.health == "failing"}
        failing = set(last_failure) - ok
        if ok:
            conn.execute(update(webhook_endpoints).where(e.id.in_(ok), e.failing_since.is_not(None))
                         .values(failing_since=None))
        for endpoint_id, result in gone.items():
            conn.execute(update(webhook_endpoints).where(e.id == endpoint_id, e.enabled.is_(True)).values(
                enabled=False, updated_at=now,
                disabled_reason=f"the endpoint answered 410 Gone at {iso(result.at)}"))
        if not failing:
            return
        conn.execute(update(webhook_endpoints).where(e.id.in_(failing), e.failing_since.is_(None))
                     .values(failing_since=now))
        overdue = conn.execute(
            select(e.id, e.failing_since).where(e.id.in_(failing), e.enabled.is_(True),
                                                e.failing_since <= now - self.disable_after)
        ).all()
        for endpoint_id, since in overdue:
            last = last_failure[endpoint_id]
            detail = last.error or f"HTTP {last.status_code}"
            reason = f"every delivery failed from {iso(since)} to {iso(now)}; last error: {detail}"
            conn.execute(update(webhook_endpoints).where(e.id == endpoint_id, e.enabled.is_(True)).values(
                enabled=False, updated_at=now, disabled_reason=reason[:MAX_REASON]))
