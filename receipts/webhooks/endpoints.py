"""Webhook endpoints, the tenant's default secret, and the deliveries log: what the API reads and writes.

The dispatcher's side (claiming due messages, recording attempts in bulk) is in
:mod:`receipts.webhooks.queue`; the rows announcing receipt transitions are written by the
transition statements themselves (:mod:`receipts.store.statements`). Every query here is scoped to
a tenant: another tenant's endpoint or message is NotFound, exactly like an unknown one. Secret
rings are dated with the database's clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from receipts import cursors, states
from receipts.db import Query, Steps, operation, transaction
from receipts.errors import Conflict, InvalidInput, NotFound
from receipts.ids import new_id
from receipts.records import Page, iso
from receipts.secretbox import SecretBox
from receipts.webhooks.records import (
    FAILED,
    MESSAGE_STATUSES,
    PENDING,
    Attempt,
    Delivery,
    Endpoint,
    SecretInfo,
    join_types,
)
from receipts.webhooks.secrets import first_ring, infos, rotate, valid

ENDPOINT_COLUMNS = ("id", "tenant_id", "url", "description", "event_types", "enabled", "disabled_reason",
                    "failing_since", "created_at", "updated_at", "consecutive_failures", "paused_until")
_ENDPOINT = ", ".join(ENDPOINT_COLUMNS)
MESSAGE_COLUMNS = ("id", "endpoint_id", "url", "event_type", "receipt_id", "status", "next_attempt_at",
                   "created_at", "updated_at")
ATTEMPT_COLUMNS = ("id", "message_id", "at", "success", "status_code", "latency_ms", "response", "error")
ENDPOINTS_KIND = "webhook-endpoints"
DELIVERIES_KIND = "deliveries"
NOW = "SELECT now()"
ENDPOINT_ROW = f"SELECT {_ENDPOINT}, secrets FROM webhook_endpoints WHERE id = %(id)s AND tenant_id = %(tenant_id)s"

_UNSET: Any = object()


def check_event_types(types: Sequence[str], field: str = "event_types") -> list[str]:
    """The subscription list, or InvalidInput naming every unknown type."""
    known = ", ".join(sorted(states.WEBHOOK_EVENT_TYPES))
    errors = [{"field": f"{field}.{i}", "message": f"unknown event type {t!r}; one of {known}"}
              for i, t in enumerate(types) if t not in states.WEBHOOK_EVENT_TYPES]
    if errors:
        raise InvalidInput("unknown event types", errors=errors)
    return list(types)


def _endpoint(row: tuple[Any, ...]) -> Endpoint:
    return Endpoint.from_row(dict(zip(ENDPOINT_COLUMNS, row[:len(ENDPOINT_COLUMNS)], strict=True)))


def _endpoint_row(tenant_id: str, endpoint_id: str, *, lock: bool = False) -> Steps[tuple[Any, ...]]:
    row = yield Query(ENDPOINT_ROW + (" FOR UPDATE" if lock else ""), {"id": endpoint_id, "tenant_id": tenant_id})
    if row is None:
        raise NotFound(f"no webhook endpoint {endpoint_id}")
    return row  # type: ignore[no-any-return]


class Endpoints:
    """The operations that need the secret box (endpoints and default secrets are signed with secrets
    stored encrypted). ``box`` is built on first use: it raises SecretKeyMissing without TOOLRELAY_SECRET_KEY."""

    def __init__(self, box: SecretBox | Callable[[], SecretBox]) -> None:
        self._box = box

    @property
    def box(self) -> SecretBox:
        if not isinstance(self._box, SecretBox):
            self._box = self._box()
        return self._box

    @operation
    def create_endpoint(self, tenant_id: str, url: str, *, event_types: Sequence[str] = (), description: str = "",
                        enabled: bool = True) -> Steps[tuple[Endpoint, str]]:
        """Register an endpoint; returns it with its new secret in clear (shown this once)."""
        types = check_event_types(event_types)
        (now,) = yield Query(NOW)
        ring, secret = first_ring(self.box, now)
        row = yield Query(
            f"INSERT INTO webhook_endpoints ({_ENDPOINT}, secrets) VALUES (%(id)s, %(tenant_id)s, %(url)s, "
            "%(description)s, %(event_types)s, %(enabled)s, %(reason)s, NULL, now(), now(), 0, NULL, %(secrets)s) "
            f"RETURNING {_ENDPOINT}",
            {"id": new_id("ep"), "tenant_id": tenant_id, "url": url, "description": description,
             "event_types": join_types(types), "enabled": enabled,
             "reason": None if enabled else "disabled by request", "secrets": Jsonb(ring)})
        return _endpoint(row), secret

    @transaction
    def rotate_endpoint_secret(self, tenant_id: str, endpoint_id: str, *,
                               grace_s: float) -> Steps[tuple[Endpoint, str, datetime]]:
        """A new secret; the previous one keeps signing for ``grace_s``. Returns it in clear, with that expiry."""
        current = yield from _endpoint_row(tenant_id, endpoint_id, lock=True)
        (now,) = yield Query(NOW)
        ring, secret, expiry = rotate(list(current[-1]), self.box, now, grace_s)
        row = yield Query(f"UPDATE webhook_endpoints SET secrets = %(secrets)s, updated_at = now() WHERE id = %(id)s "
                          f"RETURNING {_ENDPOINT}", {"id": endpoint_id, "secrets": Jsonb(ring)})
        return _endpoint(row), secret, expiry

    @transaction
    def create_default_secret(self, tenant_id: str) -> Steps[tuple[str, SecretInfo]]:
        """The tenant's first default secret, in clear. Conflict if it has one (rotate it instead)."""
        current, now = yield from _tenant_ring(tenant_id, lock=True)
        if valid(current, now):
            raise Conflict("the tenant already has a default webhook secret; rotate it instead")
        ring, secret = first_ring(self.box, now)
        yield Query(SET_RING, {"id": tenant_id, "ring": Jsonb(ring)}, fetch="none")
        return secret, infos(ring, now)[0]

    @transaction
    def rotate_default_secret(self, tenant_id: str, *, grace_s: float) -> Steps[tuple[str, SecretInfo, datetime]]:
        """A new default secret; the previous one keeps signing for ``grace_s``. NotFound if there is none."""
        current, now = yield from _tenant_ring(tenant_id, lock=True)
        if not valid(current, now):
            raise NotFound("the tenant has no default webhook secret; create one first")
        ring, secret, expiry = rotate(current, self.box, now, grace_s)
        yield Query(SET_RING, {"id": tenant_id, "ring": Jsonb(ring)}, fetch="none")
        return secret, infos(ring, now)[0], expiry


# -- endpoints -----------------------------------------------------------------------------------


@operation
def get_endpoint(tenant_id: str, endpoint_id: str) -> Steps[Endpoint]:
    return _endpoint((yield from _endpoint_row(tenant_id, endpoint_id)))


@operation
def list_endpoints(tenant_id: str, *, limit: int = 50, cursor: str | None = None) -> Steps[Page]:
    """Newest first, ``limit`` at a time.

    Raises:
        InvalidCursor: ``cursor`` is not a ``next_cursor`` of this list.
    """
    position = cursors.check(ENDPOINTS_KIND, cursor)
    after = "" if position is None else "AND id < %(before_id)s"
    rows = yield Query(f"SELECT {_ENDPOINT} FROM webhook_endpoints WHERE tenant_id = %(tenant_id)s {after} "
                       "ORDER BY id DESC LIMIT %(limit)s",
                       {"tenant_id": tenant_id, "limit": limit + 1, "before_id": position and position[0]}, fetch="all")
    return cursors.page(ENDPOINTS_KIND, [_endpoint(row) for row in rows[:limit]], lambda e: (e.id,),
                        more=len(rows) > limit)


@transaction
def update_endpoint(tenant_id: str, endpoint_id: str, *, url: str = _UNSET, event_types: Sequence[str] = _UNSET,
                    description: str = _UNSET, enabled: bool = _UNSET) -> Steps[Endpoint]:
    """Change what is given. Enabling clears the disabled reason, the failure streak and the breaker."""
    current = _endpoint((yield from _endpoint_row(tenant_id, endpoint_id, lock=True)))
    values: dict[str, Any] = {}
    if url is not _UNSET:
        values["url"] = url
    if event_types is not _UNSET:
        values["event_types"] = join_types(check_event_types(event_types))
    if description is not _UNSET:
        values["description"] = description
    if enabled is not _UNSET and enabled != current.enabled:  # re-stating the state keeps its reason and streak
        values.update(enabled=enabled, failing_since=None, disabled_reason=None if enabled else "disabled by request",
                      consecutive_failures=0, paused_until=None, pauses=0)
    assignments = "".join(f"{name} = %({name})s, " for name in values)
    row = yield Query(f"UPDATE webhook_endpoints SET {assignments}updated_at = now() WHERE id = %(id)s "
                      f"RETURNING {_ENDPOINT}", {**values, "id": endpoint_id})
    return _endpoint(row)


@transaction
def delete_endpoint(tenant_id: str, endpoint_id: str) -> Steps[None]:
    """Remove the endpoint with its messages and their attempts."""
    yield from _endpoint_row(tenant_id, endpoint_id, lock=True)
    for table in ("webhook_attempts", "webhook_messages"):
        yield Query(f"DELETE FROM {table} WHERE endpoint_id = %(id)s", {"id": endpoint_id}, fetch="none")
    yield Query("DELETE FROM webhook_endpoints WHERE id = %(id)s", {"id": endpoint_id}, fetch="none")


@operation
def endpoint_secrets(tenant_id: str, endpoint_id: str) -> Steps[list[SecretInfo]]:
    row = yield from _endpoint_row(tenant_id, endpoint_id)
    (now,) = yield Query(NOW)
    return infos(list(row[-1]), now)


# -- the tenant's default secret (for a call's own webhook_url) ------------------------------------

SET_RING = "UPDATE tenants SET webhook_secrets = %(ring)s WHERE id = %(id)s"


def _tenant_ring(tenant_id: str, *, lock: bool = False) -> Steps[tuple[list[dict[str, Any]], datetime]]:
    row = yield Query("SELECT webhook_secrets, now() FROM tenants WHERE id = %(id)s" + (" FOR UPDATE" if lock else ""),
                      {"id": tenant_id})
    if row is None:
        raise NotFound(f"no tenant {tenant_id}")
    return list(row[0] or []), row[1]


@operation
def default_secrets(tenant_id: str) -> Steps[list[SecretInfo]]:
    """The tenant's valid default secrets (when made, until when), newest first; empty if none."""
    ring, now = yield from _tenant_ring(tenant_id)
    return infos(ring, now)


@operation
def has_default_secret(tenant_id: str) -> Steps[bool]:
    return bool((yield from default_secrets(tenant_id).steps))


# -- deliveries ------------------------------------------------------------------------------------

_MESSAGE = ", ".join(MESSAGE_COLUMNS)


def _attempts(message_ids: list[str]) -> Steps[dict[str, list[Attempt]]]:
    found: dict[str, list[Attempt]] = {message_id: [] for message_id in message_ids}
    if message_ids:
        rows = yield Query(f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM webhook_attempts "
                           "WHERE message_id = ANY(%(ids)s) ORDER BY id", {"ids": message_ids}, fetch="all",
                           prepared=False)  # its best plan depends on the table's size (see Query)
        for row in rows:
            found[row[1]].append(Attempt.from_row(dict(zip(ATTEMPT_COLUMNS, row, strict=True))))
    return found


def _deliveries(rows: list[tuple[Any, ...]]) -> Steps[list[Delivery]]:
    attempts = yield from _attempts([row[0] for row in rows])
    return [Delivery.from_row(dict(zip(MESSAGE_COLUMNS, row, strict=True)), attempts[row[0]]) for row in rows]


@operation
def deliveries(tenant_id: str, *, endpoint_id: str | None = None, receipt_id: str | None = None,
               status: str | None = None, limit: int = 50, cursor: str | None = None) -> Steps[Page]:
    """Messages newest first, each with its attempts; filtered by endpoint, receipt or status.

    Raises:
        NotFound: ``endpoint_id`` is not one of the tenant's endpoints.
        InvalidInput: an unknown status, or a cursor not from this list.
    """
    if status is not None and status not in MESSAGE_STATUSES:
        raise InvalidInput("invalid status",
                           errors=[{"field": "status", "message": f"one of {', '.join(MESSAGE_STATUSES)}"}])
    position = cursors.check(DELIVERIES_KIND, cursor, width=2)
    if endpoint_id is not None:
        yield from _endpoint_row(tenant_id, endpoint_id)
    params: dict[str, Any] = {"tenant_id": tenant_id, "endpoint_id": endpoint_id, "receipt_id": receipt_id,
                              "status": status, "limit": limit + 1}
    conditions = ["tenant_id = %(tenant_id)s", *(f"{name} = %({name})s" for name in ("endpoint_id", "receipt_id",
                                                                                      "status") if params[name])]
    if position is not None:
        conditions.append("(created_at, id) < (%(stamp)s::timestamptz, %(last_id)s)")
        params.update(stamp=position[0], last_id=position[1])
    rows = yield Query(f"SELECT {_MESSAGE} FROM webhook_messages WHERE {' AND '.join(conditions)} "
                       "ORDER BY created_at DESC, id DESC LIMIT %(limit)s", params, fetch="all")
    items = yield from _deliveries(rows[:limit])
    return cursors.page(DELIVERIES_KIND, items, lambda d: (iso(d.created_at) or "", d.id), more=len(rows) > limit)


@operation
def delivery(tenant_id: str, message_id: str) -> Steps[Delivery]:
    row = yield Query(f"SELECT {_MESSAGE} FROM webhook_messages WHERE id = %(id)s AND tenant_id = %(tenant_id)s",
                      {"id": message_id, "tenant_id": tenant_id})
    if row is None:
        raise NotFound(f"no delivery {message_id}")
    return (yield from _deliveries([row]))[0]


def _require_enabled(tenant_id: str, endpoint_id: str | None) -> Steps[None]:
    if endpoint_id is None:
        return
    endpoint = _endpoint((yield from _endpoint_row(tenant_id, endpoint_id)))
    if not endpoint.enabled:
        raise Conflict(f"the endpoint is disabled ({endpoint.disabled_reason}); "
                       "enable it first (PATCH with enabled=true)")


@transaction
def retry(tenant_id: str, message_id: str) -> Steps[Delivery]:
    """Send a message again now. A finished message starts the retry schedule afresh."""
    row = yield Query("SELECT endpoint_id, status FROM webhook_messages "
                      "WHERE id = %(id)s AND tenant_id = %(tenant_id)s FOR UPDATE",
                      {"id": message_id, "tenant_id": tenant_id})
    if row is None:
        raise NotFound(f"no delivery {message_id}")
    yield from _require_enabled(tenant_id, row[0])
    # ::text on both uses of the parameter: PostgreSQL would deduce varchar from the SET and text from the
    # comparison, and refuse the statement.
    yield Query("UPDATE webhook_messages SET status = %(pending)s::text, next_attempt_at = now(), updated_at = now(), "
                "attempts = CASE WHEN status = %(pending)s::text THEN attempts ELSE 0 END WHERE id = %(id)s",
                {"id": message_id, "pending": PENDING}, fetch="none")
    return (yield from delivery(tenant_id, message_id).steps)


@transaction
def recover(tenant_id: str, endpoint_id: str, *, since: datetime, until: datetime | None = None) -> Steps[int]:
    """Queue again every failed message of the endpoint created since ``since``; returns how many."""
    yield from _require_enabled(tenant_id, endpoint_id)
    window = "" if until is None else "AND created_at < %(until)s"
    return (yield Query(  # type: ignore[no-any-return]
        "UPDATE webhook_messages SET status = %(pending)s, attempts = 0, next_attempt_at = now(), updated_at = now() "
        f"WHERE endpoint_id = %(endpoint_id)s AND tenant_id = %(tenant_id)s AND status = %(failed)s "
        f"AND created_at >= %(since)s {window}",
        {"endpoint_id": endpoint_id, "tenant_id": tenant_id, "pending": PENDING, "failed": FAILED, "since": since,
         "until": until}, fetch="rowcount"))


@operation
def pending_count(tenant_id: str | None = None) -> Steps[int]:
    """Messages waiting to be delivered (for metrics and tests)."""
    scope = "" if tenant_id is None else "AND tenant_id = %(tenant_id)s"
    (count,) = yield Query(f"SELECT count(*) FROM webhook_messages WHERE status = 'pending' {scope}",
                           {"tenant_id": tenant_id})
    return int(count)
