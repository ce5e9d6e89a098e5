"""Webhook endpoints, the tenant's default secret, and the deliveries log: what the API reads and writes.

The dispatcher's side (claiming due messages, recording attempts in bulk) is in
:mod:`receipts.webhook_queue`; the rows announcing receipt transitions are written by
:mod:`receipts.outbox`. Every query here is scoped to a tenant: another tenant's endpoint or message
is NotFound, exactly like an unknown one.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, delete, func, insert, or_, select, update

from receipts import states
from receipts.db import Database, utcnow
from receipts.errors import Conflict, InvalidInput, NotFound
from receipts.ids import new_id
from receipts.records import Page
from receipts.secretbox import SecretBox
from receipts.store import decode_cursor, encode_cursor
from receipts.tables import tenants, webhook_attempts, webhook_endpoints, webhook_messages
from receipts.webhook_records import (
    FAILED,
    MESSAGE_STATUSES,
    PENDING,
    Attempt,
    Delivery,
    Endpoint,
    SecretInfo,
    join_types,
)
from receipts.webhook_secrets import first_ring, infos, rotate, valid

_UNSET: Any = object()


def check_event_types(types: Sequence[str], field: str = "event_types") -> list[str]:
    """The subscription list, or InvalidInput naming every unknown type."""
    known = ", ".join(sorted(states.WEBHOOK_EVENT_TYPES))
    errors = [
        {"field": f"{field}.{i}", "message": f"unknown event type {t!r}; one of {known}"}
        for i, t in enumerate(types)
        if t not in states.WEBHOOK_EVENT_TYPES
    ]
    if errors:
        raise InvalidInput("unknown event types", errors=errors)
    return list(types)


def _encode_position(created_at: datetime, message_id: str) -> str:
    return base64.urlsafe_b64encode(f"{created_at.isoformat()}|{message_id}".encode()).decode().rstrip("=")


def _decode_position(cursor: str) -> tuple[datetime, str]:
    try:
        text = base64.urlsafe_b64decode((cursor + "=" * (-len(cursor) % 4)).encode()).decode()
        stamp, message_id = text.split("|", 1)
        return datetime.fromisoformat(stamp), message_id
    except ValueError as exc:
        raise InvalidInput("invalid cursor", errors=[{"field": "cursor", "message": "not a cursor from next_cursor"}]) \
            from exc


class WebhookStore:
    """Endpoints, default secrets and deliveries of every tenant, on a :class:`~receipts.db.Database`."""

    def __init__(self, db: Database, secret_key: str) -> None:
        self.db = db
        self._secret_key = secret_key
        self._box: SecretBox | None = None

    @property
    def box(self) -> SecretBox:
        """The secret box; raises SecretKeyMissing when TOOLRELAY_SECRET_KEY is not set."""
        if self._box is None:
            self._box = SecretBox(self._secret_key)
        return self._box

    # -- endpoints ---------------------------------------------------------------------------

    def create_endpoint(self, tenant_id: str, url: str, *, event_types: Sequence[str] = (),
                        description: str = "", enabled: bool = True) -> tuple[Endpoint, str]:
        """Register an endpoint; returns it with its new secret in clear (shown this once)."""
        types = check_event_types(event_types)
        now = utcnow()
        ring, secret = first_ring(self.box, now)
        with self.db.transaction() as conn:
            row = conn.execute(
                insert(webhook_endpoints).values(
                    id=new_id("ep"), tenant_id=tenant_id, url=url, description=description,
                    event_types=join_types(types), enabled=enabled,
                    disabled_reason=None if enabled else "disabled by request", secrets=ring, failing_since=None,
                    created_at=now, updated_at=now,
                ).returning(*webhook_endpoints.c)
            ).mappings().one()
        return Endpoint.from_row(row), secret

    def _endpoint_row(self, conn: Connection, tenant_id: str, endpoint_id: str, *, lock: bool = False) -> Any:
        query = select(webhook_endpoints).where(webhook_endpoints.c.id == endpoint_id,
                                                webhook_endpoints.c.tenant_id == tenant_id)
        row = conn.execute(query.with_for_update() if lock else query).mappings().first()
        if row is None:
            raise NotFound(f"no webhook endpoint {endpoint_id}")
        return row

    def get_endpoint(self, tenant_id: str, endpoint_id: str) -> Endpoint:
        with self.db.read() as conn:
            return Endpoint.from_row(self._endpoint_row(conn, tenant_id, endpoint_id))

    def list_endpoints(self, tenant_id: str, *, limit: int = 50, cursor: str | None = None) -> Page:
        """Newest first, ``limit`` at a time."""
        c = webhook_endpoints.c
        conditions = [c.tenant_id == tenant_id]
        if cursor:
            conditions.append(c.id < decode_cursor(cursor))
        with self.db.read() as conn:
            rows = conn.execute(
                select(webhook_endpoints).where(*conditions).order_by(c.id.desc()).limit(limit + 1)
            ).mappings().all()
        items = [Endpoint.from_row(row) for row in rows[:limit]]
        return Page(items=items, next_cursor=encode_cursor(items[-1].id) if len(rows) > limit else None)

    def update_endpoint(self, tenant_id: str, endpoint_id: str, *, url: str = _UNSET,
                        event_types: Sequence[str] = _UNSET, description: str = _UNSET,
                        enabled: bool = _UNSET) -> Endpoint:
        """Change what is given. Enabling clears the disabled reason and the failure streak."""
        values: dict[str, Any] = {"updated_at": utcnow()}
        if url is not _UNSET:
            values["url"] = url
        if event_types is not _UNSET:
            values["event_types"] = join_types(check_event_types(event_types))
        if description is not _UNSET:
            values["description"] = description
        if enabled is not _UNSET:
            values.update(enabled=enabled, failing_since=None,
                          disabled_reason=None if enabled else "disabled by request")
        with self.db.transaction() as conn:
            current = self._endpoint_row(conn, tenant_id, endpoint_id, lock=True)
            if enabled is not _UNSET and enabled == current["enabled"]:
                # Re-stating the current state keeps its reason and streak.
                for key in ("enabled", "failing_since", "disabled_reason"):
                    values.pop(key)
            row = conn.execute(
                update(webhook_endpoints).where(webhook_endpoints.c.id == endpoint_id)
                .values(**values).returning(*webhook_endpoints.c)
            ).mappings().one()
        return Endpoint.from_row(row)

    def delete_endpoint(self, tenant_id: str, endpoint_id: str) -> None:
        """Remove the endpoint with its messages and their attempts."""
        with self.db.transaction() as conn:
            self._endpoint_row(conn, tenant_id, endpoint_id, lock=True)
            conn.execute(delete(webhook_attempts).where(webhook_attempts.c.endpoint_id == endpoint_id))
            conn.execute(delete(webhook_messages).where(webhook_messages.c.endpoint_id == endpoint_id))
            conn.execute(delete(webhook_endpoints).where(webhook_endpoints.c.id == endpoint_id))

    def rotate_endpoint_secret(self, tenant_id: str, endpoint_id: str, *,
                               grace_s: float) -> tuple[Endpoint, str, datetime]:
        """A new secret; the previous one keeps signing for ``grace_s``. Returns it in clear, with that expiry."""
        now = utcnow()
        with self.db.transaction() as conn:
            current = self._endpoint_row(conn, tenant_id, endpoint_id, lock=True)
            ring, secret, expiry = rotate(list(current["secrets"]), self.box, now, grace_s)
            row = conn.execute(
                update(webhook_endpoints).where(webhook_endpoints.c.id == endpoint_id)
                .values(secrets=ring, updated_at=now).returning(*webhook_endpoints.c)
            ).mappings().one()
        return Endpoint.from_row(row), secret, expiry

    def endpoint_secrets(self, tenant_id: str, endpoint_id: str) -> list[SecretInfo]:
        with self.db.read() as conn:
            return infos(list(self._endpoint_row(conn, tenant_id, endpoint_id)["secrets"]), utcnow())

    # -- the tenant's default secret (for a call's own webhook_url) ----------------------------

    def _tenant_ring(self, conn: Connection, tenant_id: str, *, lock: bool = False) -> list[dict[str, Any]]:
        query = select(tenants.c.webhook_secrets).where(tenants.c.id == tenant_id)
        ring = conn.execute(query.with_for_update() if lock else query).scalar_one_or_none()
        return list(ring or [])

    def default_secrets(self, tenant_id: str) -> list[SecretInfo]:
        """The tenant's valid default secrets (when made, until when), newest first; empty if none."""
        with self.db.read() as conn:
            return infos(self._tenant_ring(conn, tenant_id), utcnow())

    def create_default_secret(self, tenant_id: str) -> tuple[str, SecretInfo]:
        """The tenant's first default secret, in clear. Conflict if it has one (rotate it instead)."""
        now = utcnow()
        with self.db.transaction() as conn:
            if valid(self._tenant_ring(conn, tenant_id, lock=True), now):
                raise Conflict("the tenant already has a default webhook secret; rotate it instead")
            ring, secret = first_ring(self.box, now)
            conn.execute(update(tenants).where(tenants.c.id == tenant_id).values(webhook_secrets=ring))
        return secret, infos(ring, now)[0]

    def rotate_default_secret(self, tenant_id: str, *, grace_s: float) -> tuple[str, SecretInfo, datetime]:
        """A new default secret; the previous one keeps signing for ``grace_s``. NotFound if there is none."""
        now = utcnow()
        with self.db.transaction() as conn:
            current = self._tenant_ring(conn, tenant_id, lock=True)
            if not valid(current, now):
                raise NotFound("the tenant has no default webhook secret; create one first")
            ring, secret, expiry = rotate(current, self.box, now, grace_s)
            conn.execute(update(tenants).where(tenants.c.id == tenant_id).values(webhook_secrets=ring))
        return secret, infos(ring, now)[0], expiry

    # -- deliveries --------------------------------------------------------------------------

    def _attempts(self, conn: Connection, message_ids: list[str]) -> dict[str, list[Attempt]]:
        found: dict[str, list[Attempt]] = {message_id: [] for message_id in message_ids}
        if message_ids:
            rows = conn.execute(
                select(webhook_attempts).where(webhook_attempts.c.message_id.in_(message_ids))
                .order_by(webhook_attempts.c.id)
            ).mappings().all()
            for row in rows:
                found[row["message_id"]].append(Attempt.from_row(row))
        return found

    def deliveries(self, tenant_id: str, *, endpoint_id: str | None = None, receipt_id: str | None = None,
                   status: str | None = None, limit: int = 50, cursor: str | None = None) -> Page:
        """Messages newest first, each with its attempts; filtered by endpoint, receipt or status."""
        m = webhook_messages.c
        conditions: list[Any] = [m.tenant_id == tenant_id]
        if endpoint_id is not None:
            self.get_endpoint(tenant_id, endpoint_id)
            conditions.append(m.endpoint_id == endpoint_id)
        if receipt_id is not None:
            conditions.append(m.receipt_id == receipt_id)
        if status is not None:
            if status not in MESSAGE_STATUSES:
                raise InvalidInput("invalid status", errors=[{"field": "status",
                                                              "message": f"one of {', '.join(MESSAGE_STATUSES)}"}])
            conditions.append(m.status == status)
        if cursor:
            stamp, last_id = _decode_position(cursor)
            conditions.append(or_(m.created_at < stamp, and_(m.created_at == stamp, m.id < last_id)))
        with self.db.read() as conn:
            rows = conn.execute(
                select(webhook_messages).where(and_(*conditions))
                .order_by(m.created_at.desc(), m.id.desc()).limit(limit + 1)
            ).mappings().all()
            page = rows[:limit]
            attempts = self._attempts(conn, [row["id"] for row in page])
        items = [Delivery.from_row(row, attempts[row["id"]]) for row in page]
        last = page[-1] if page else None
        next_cursor = _encode_position(last["created_at"], last["id"]) if last and len(rows) > limit else None
        return Page(items=items, next_cursor=next_cursor)

    def delivery(self, tenant_id: str, message_id: str) -> Delivery:
        with self.db.read() as conn:
            row = conn.execute(
                select(webhook_messages).where(webhook_messages.c.id == message_id,
                                               webhook_messages.c.tenant_id == tenant_id)
            ).mappings().first()
            if row is None:
                raise NotFound(f"no delivery {message_id}")
            return Delivery.from_row(row, self._attempts(conn, [message_id])[message_id])

    def _require_enabled(self, conn: Connection, tenant_id: str, endpoint_id: str | None) -> None:
        if endpoint_id is None:
            return
        endpoint = self._endpoint_row(conn, tenant_id, endpoint_id)
        if not endpoint["enabled"]:
            raise Conflict(f"the endpoint is disabled ({endpoint['disabled_reason']}); "
                           "enable it first (PATCH with enabled=true)")

    def retry(self, tenant_id: str, message_id: str) -> Delivery:
        """Send a message again now. A finished message starts the retry schedule afresh."""
        now = utcnow()
        with self.db.transaction() as conn:
            row = conn.execute(
                select(webhook_messages).where(webhook_messages.c.id == message_id,
                                               webhook_messages.c.tenant_id == tenant_id).with_for_update()
            ).mappings().first()
            if row is None:
                raise NotFound(f"no delivery {message_id}")
            self._require_enabled(conn, tenant_id, row["endpoint_id"])
            values: dict[str, Any] = {"status": PENDING, "next_attempt_at": now, "updated_at": now}
            if row["status"] != PENDING:
                values["attempts"] = 0
            conn.execute(update(webhook_messages).where(webhook_messages.c.id == message_id).values(**values))
        return self.delivery(tenant_id, message_id)

    def recover(self, tenant_id: str, endpoint_id: str, *, since: datetime, until: datetime | None = None) -> int:
        """Queue again every failed message of the endpoint created since ``since``; returns how many."""
        now = utcnow()
        m = webhook_messages.c
        with self.db.transaction() as conn:
            self._require_enabled(conn, tenant_id, endpoint_id)
            conditions = [m.endpoint_id == endpoint_id, m.tenant_id == tenant_id, m.status == FAILED,
                          m.created_at >= since]
            if until is not None:
                conditions.append(m.created_at < until)
            result = conn.execute(
                update(webhook_messages).where(*conditions)
                .values(status=PENDING, attempts=0, next_attempt_at=now, updated_at=now)
            )
        return int(result.rowcount or 0)

    def has_default_secret(self, tenant_id: str) -> bool:
        return bool(self.default_secrets(tenant_id))

    def pending_count(self, tenant_id: str | None = None) -> int:
        """Messages waiting to be delivered (for metrics and tests)."""
        m = webhook_messages.c
        query = select(func.count()).select_from(webhook_messages).where(m.status == PENDING)
        if tenant_id is not None:
            query = query.where(m.tenant_id == tenant_id)
        with self.db.read() as conn:
            return int(conn.execute(query).scalar_one())
