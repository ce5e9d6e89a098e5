"""Records of the webhook side: endpoints, messages (deliveries), attempts, and what a dispatcher claims.

Frozen dataclasses built from rows; ``to_api()`` gives the JSON shape the HTTP API returns. Secrets
never appear in these shapes: they are shown once, by the calls that create or rotate them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from receipts.records import iso

# Message statuses.
PENDING = "pending"
DELIVERED = "delivered"
FAILED = "failed"
MESSAGE_STATUSES = (PENDING, DELIVERED, FAILED)


def split_types(stored: str) -> list[str]:
    """``",a,b,"`` -> ``["a", "b"]``; ``""`` (every type) -> ``[]``."""
    return [part for part in stored.split(",") if part]


def join_types(types: list[str] | tuple[str, ...]) -> str:
    """The stored form of a subscription list, matchable with LIKE ``%,type,%``."""
    return f",{','.join(sorted(set(types)))}," if types else ""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A URL a tenant registered to receive the events it subscribed to."""

    id: str
    tenant_id: str
    url: str
    description: str
    event_types: list[str]
    enabled: bool
    disabled_reason: str | None
    failing_since: datetime | None
    created_at: datetime
    updated_at: datetime
    consecutive_failures: int = 0
    paused_until: datetime | None = None  # the breaker is open (or waiting for its trial) while set

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> Endpoint:
        return cls(
            id=row["id"],
            tenant_id=row["tenant_id"],
            url=row["url"],
            description=row["description"],
            event_types=split_types(row["event_types"]),
            enabled=row["enabled"],
            disabled_reason=row["disabled_reason"],
            failing_since=row["failing_since"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            consecutive_failures=row["consecutive_failures"],
            paused_until=row["paused_until"],
        )

    def to_api(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "url": self.url,
            "description": self.description,
            "event_types": self.event_types,
            "enabled": self.enabled,
            "disabled_reason": self.disabled_reason,
            "failing_since": iso(self.failing_since),
            "consecutive_failures": self.consecutive_failures,
            "paused_until": iso(self.paused_until),
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
        }


@dataclass(frozen=True, slots=True)
class SecretInfo:
    """When a signing secret was made and until when it is still used (None: the current one)."""

    created_at: datetime
    expires_at: datetime | None

    def to_api(self) -> dict[str, Any]:
        return {"created_at": iso(self.created_at), "expires_at": iso(self.expires_at)}


@dataclass(frozen=True, slots=True)
class Attempt:
    """One HTTP request made for a message, as the deliveries log shows it."""

    id: int
    message_id: str
    at: datetime
    success: bool
    status_code: int | None
    latency_ms: float | None
    response: str | None
    error: str | None

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> Attempt:
        return cls(**{name: row[name] for name in cls.__slots__})  # type: ignore[attr-defined]

    def to_api(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": iso(self.at),
            "success": self.success,
            "status_code": self.status_code,
            "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 3),
            "response": self.response,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message with its attempts: what ``GET .../deliveries`` lists."""

    id: str
    endpoint_id: str | None
    url: str | None
    event_type: str
    receipt_id: str
    status: str
    next_attempt_at: datetime | None
    created_at: datetime
    updated_at: datetime
    attempts: list[Attempt]

    @classmethod
    def from_row(cls, row: Mapping[Any, Any], attempts: list[Attempt]) -> Delivery:
        return cls(
            id=row["id"],
            endpoint_id=row["endpoint_id"],
            url=row["url"],
            event_type=row["event_type"],
            receipt_id=row["receipt_id"],
            status=row["status"],
            next_attempt_at=row["next_attempt_at"] if row["status"] == PENDING else None,
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            attempts=attempts,
        )

    def to_api(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "endpoint_id": self.endpoint_id,
            "url": self.url,
            "event_type": self.event_type,
            "receipt_id": self.receipt_id,
            "status": self.status,
            "attempt_count": len(self.attempts),
            "next_attempt_at": iso(self.next_attempt_at),
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
            "attempts": [attempt.to_api() for attempt in self.attempts],
        }


@dataclass(frozen=True, slots=True)
class Claimed:
    """A due message a dispatcher holds the lease of, with where and how to send it.

    ``secrets`` are the encrypted signing secrets still valid (newest first); ``refusal`` says why
    the message cannot be sent at all (endpoint disabled or deleted, no default secret).
    ``lease`` is the ``locked_until`` value written by the claim: the fencing token of the result.
    ``traceparent`` is the trace context of the receipt the message reports, sent along so the
    delivery joins that trace. ``trial`` says the message is the one its paused endpoint lets through
    once its cool-down is over.
    """

    id: str
    tenant_id: str
    endpoint_id: str | None
    url: str
    event_type: str
    receipt_id: str
    payload: Any
    attempts: int
    lease: datetime
    secrets: tuple[str, ...]
    refusal: str | None = None
    traceparent: str | None = None
    trial: bool = False

    @property
    def lane(self) -> str:
        """What the per-endpoint cap counts by: the endpoint, or the call's own URL."""
        return lane_of(self.endpoint_id, self.url)


@dataclass(frozen=True, slots=True)
class Settled:
    """The result of one attempt and what happens to its message next, recorded in bulk.

    ``sent_at`` is when the attempt started by the dispatcher's monotonic clock (recorded as the
    database's time less how long ago that was); ``retry_in_s`` when the next attempt is due, from
    when it is recorded (None: no next attempt). ``health`` is ``"ok"``, ``"failing"``, ``"gone"``
    (410: disable the endpoint) or ``None`` (the attempt says nothing about the endpoint, e.g. it was
    never sent).
    """

    message_id: str
    endpoint_id: str | None
    lease: datetime
    sent_at: float
    success: bool
    status_code: int | None
    latency_ms: float | None
    response: str | None
    error: str | None
    status: str
    attempts: int
    retry_in_s: float | None
    health: str | None
    trial: bool = False  # the attempt was its paused endpoint's trial


@dataclass(frozen=True, slots=True)
class Breaker:
    """When an endpoint that keeps failing is paused, and for how long.

    After ``failures`` failed attempts in a row (0: never) the endpoint gets nothing for
    ``cooldown_s``, then one trial message: a success closes the breaker, a failure pauses it again for
    twice as long as the last time, up to ``max_s``. Its messages wait meanwhile; they are not failed.
    """

    failures: int = 20
    cooldown_s: float = 30.0
    max_s: float = 3600.0


def lane_of(endpoint_id: str | None, url: str | None) -> str:
    """The lane of a message (the SQL side is ``coalesce(endpoint_id, url)``)."""
    return endpoint_id or url or ""
