"""The dispatcher's side of the outbox: claim due messages in batches, record their attempts in bulk.

A claim is one statement: it leases up to ``limit`` due messages (``locked_until``, the lease) picked
``FOR UPDATE SKIP LOCKED``, so dispatchers running side by side take disjoint batches without
waiting on each other, and returns them with their endpoint's URL and secrets (or the tenant's
default secrets, for a call's own ``webhook_url``). A dispatcher that dies keeps its messages only
until the lease runs out; then another one claims them again (at-least-once).

Recording writes every attempt of a batch with one INSERT and moves each message on with one UPDATE,
fenced by the lease it was claimed with: if the lease ran out and another dispatcher took the
message, the late result is logged as an attempt but does not overwrite the newer state. Leases,
due times and attempt times are the database's clock; an attempt's time is the database's ``now()``
when it is recorded, less how long ago (by the dispatcher's monotonic clock) it was sent.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from receipts.db import Query, Steps, operation, transaction
from receipts.records import PG_ISO_FORMAT, iso
from receipts.webhooks.records import Claimed, Settled
from receipts.webhooks.secrets import tokens

MAX_REASON = 1000

CLAIM = """
WITH due AS (
    SELECT id FROM webhook_messages
    WHERE status = 'pending' AND next_attempt_at <= now() AND (locked_until IS NULL OR locked_until <= now())
    ORDER BY next_attempt_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), m AS (
    UPDATE webhook_messages SET locked_until = now() + make_interval(secs => %(lease_s)s)
    FROM due WHERE webhook_messages.id = due.id
    RETURNING webhook_messages.id, webhook_messages.tenant_id, webhook_messages.endpoint_id, webhook_messages.url,
              webhook_messages.event_type, webhook_messages.receipt_id, webhook_messages.payload,
              webhook_messages.attempts, webhook_messages.locked_until, webhook_messages.traceparent
)
SELECT m.id, m.tenant_id, m.endpoint_id, m.url, m.event_type, m.receipt_id, m.payload, m.attempts, m.locked_until,
       e.id IS NOT NULL, e.url, e.enabled, e.disabled_reason, e.secrets, t.webhook_secrets, now(), m.traceparent
FROM m LEFT JOIN webhook_endpoints e ON e.id = m.endpoint_id
       LEFT JOIN tenants t ON m.endpoint_id IS NULL AND t.id = m.tenant_id
ORDER BY m.id"""

RELEASE_ALL = "UPDATE webhook_messages SET locked_until = NULL WHERE status = 'pending' AND locked_until IS NOT NULL"

ATTEMPTS = """
INSERT INTO webhook_attempts (message_id, endpoint_id, at, success, status_code, latency_ms, response, error)
SELECT u.message_id, u.endpoint_id, now() - make_interval(secs => u.ago_s), u.success, u.status_code, u.latency_ms,
       u.response, u.error
FROM unnest(%(message_id)s::text[], %(endpoint_id)s::text[], %(ago_s)s::float8[], %(success)s::bool[],
            %(status_code)s::int[], %(latency_ms)s::float8[], %(response)s::text[], %(error)s::text[])
     AS u(message_id, endpoint_id, ago_s, success, status_code, latency_ms, response, error)"""

MOVE_ON = """
UPDATE webhook_messages m SET status = u.status, attempts = u.attempts, locked_until = NULL, updated_at = now(),
       next_attempt_at = CASE WHEN u.retry_in_s IS NULL THEN NULL ELSE now() + make_interval(secs => u.retry_in_s) END
FROM unnest(%(id)s::text[], %(lease)s::timestamptz[], %(status)s::text[], %(attempts)s::int[], %(retry_in_s)s::float8[])
     AS u(id, lease, status, attempts, retry_in_s)
WHERE m.id = u.id AND m.locked_until = u.lease"""

HEALTHY = "UPDATE webhook_endpoints SET failing_since = NULL WHERE id = ANY(%(ids)s) AND failing_since IS NOT NULL"
GONE = f"""
UPDATE webhook_endpoints SET enabled = false, updated_at = now(),
       disabled_reason = 'the endpoint answered 410 Gone at ' || to_char(now() AT TIME ZONE 'UTC', '{PG_ISO_FORMAT}')
WHERE id = ANY(%(ids)s) AND enabled"""
FAILING = """
UPDATE webhook_endpoints SET failing_since = now() WHERE id = ANY(%(ids)s) AND failing_since IS NULL"""
OVERDUE = """
SELECT id, failing_since, now() FROM webhook_endpoints
WHERE id = ANY(%(ids)s) AND enabled AND failing_since <= now() - make_interval(secs => %(after_s)s)"""
DISABLE = ("UPDATE webhook_endpoints SET enabled = false, updated_at = now(), disabled_reason = %(reason)s "
           "WHERE id = %(id)s AND enabled")


def _claimed(row: tuple[Any, ...]) -> Claimed:
    (message_id, tenant_id, endpoint_id, url, event_type, receipt_id, payload, attempts, lease,
     endpoint_exists, endpoint_url, enabled, disabled_reason, endpoint_ring, tenant_ring, now, traceparent) = row
    refusal = None
    secrets: tuple[str, ...] = ()
    if endpoint_id is not None:
        if not endpoint_exists:
            url, refusal = "", "not sent: the endpoint was deleted"
        else:
            url, secrets = endpoint_url, tokens(list(endpoint_ring), now)
            if not enabled:
                refusal = f"not sent: the endpoint is disabled ({disabled_reason})"
    else:
        secrets = tokens(list(tenant_ring or []), now)
    if refusal is None and not secrets:
        refusal = ("not sent: the tenant has no default webhook secret (create one with POST /v1/webhook-secret)"
                   if endpoint_id is None else "not sent: the endpoint has no valid signing secret")
    return Claimed(id=message_id, tenant_id=tenant_id, endpoint_id=endpoint_id, url=url, event_type=event_type,
                   receipt_id=receipt_id, payload=payload, attempts=attempts, lease=lease, secrets=secrets,
                   refusal=refusal, traceparent=traceparent)


@operation
def claim(limit: int, *, lease_s: float) -> Steps[list[Claimed]]:
    """Lease up to ``limit`` due messages (oldest due first) with everything needed to send them."""
    rows = yield Query(CLAIM, {"limit": limit, "lease_s": lease_s}, fetch="all")
    return [_claimed(row) for row in rows]


@operation
def release_all() -> Steps[int]:
    """Drop every lease: for a single process that owns the database, coming back after a crash."""
    return (yield Query(RELEASE_ALL, fetch="rowcount"))  # type: ignore[no-any-return]


def _columns(results: Sequence[Settled], now: float) -> dict[str, list[Any]]:
    return {
        "message_id": [r.message_id for r in results], "endpoint_id": [r.endpoint_id for r in results],
        "ago_s": [max(0.0, now - r.sent_at) for r in results], "success": [r.success for r in results],
        "status_code": [r.status_code for r in results], "latency_ms": [r.latency_ms for r in results],
        "response": [r.response for r in results], "error": [r.error for r in results],
    }


@transaction
def record(results: Sequence[Settled], *, disable_after_s: float) -> Steps[None]:
    """Write the attempts, move the messages on (fenced by their lease) and update endpoint health.

    ``disable_after_s``: how long an endpoint may fail without a break before it is disabled.
    """
    if not results:
        return
    yield Query(ATTEMPTS, _columns(results, time.monotonic()), fetch="none")
    yield Query(MOVE_ON, {"id": [r.message_id for r in results], "lease": [r.lease for r in results],
                          "status": [r.status for r in results], "attempts": [r.attempts for r in results],
                          "retry_in_s": [r.retry_in_s for r in results]}, fetch="none")
    yield from _health(results, disable_after_s)


def _health(results: Sequence[Settled], disable_after_s: float) -> Steps[None]:
    """Clear the failure streak of endpoints that answered 2xx; start it, or disable, for the others."""
    ok = {r.endpoint_id for r in results if r.endpoint_id and r.health == "ok"}
    gone = {r.endpoint_id for r in results if r.endpoint_id and r.health == "gone"}
    last_failure = {r.endpoint_id: r for r in results if r.endpoint_id and r.health == "failing"}
    failing = sorted(set(last_failure) - ok)
    if ok:
        yield Query(HEALTHY, {"ids": sorted(ok)}, fetch="none")
    if gone:
        yield Query(GONE, {"ids": sorted(gone)}, fetch="none")
    if not failing:
        return
    yield Query(FAILING, {"ids": failing}, fetch="none")
    overdue = yield Query(OVERDUE, {"ids": failing, "after_s": disable_after_s}, fetch="all")
    for endpoint_id, since, now in overdue:
        last = last_failure[endpoint_id]
        detail = last.error or f"HTTP {last.status_code}"
        reason = f"every delivery failed from {iso(since)} to {iso(now)}; last error: {detail}"
        yield Query(DISABLE, {"id": endpoint_id, "reason": reason[:MAX_REASON]}, fetch="none")
