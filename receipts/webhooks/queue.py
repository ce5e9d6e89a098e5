"""The dispatcher's side of the outbox: claim due messages in batches, record their attempts in bulk.

A claim is one statement: it leases up to ``limit`` due messages (``locked_until``, the lease) picked
``FOR UPDATE SKIP LOCKED``, so dispatchers running side by side take disjoint batches without
waiting on each other, and returns them with their endpoint's URL and secrets (or the tenant's
default secrets, for a call's own ``webhook_url``). A dispatcher that dies keeps its messages only
until the lease runs out; then another one claims them again (at-least-once).

Endpoints are isolated from each other: a claim takes at most a dispatcher's per-endpoint cap of one
endpoint's messages (counting those it has in flight there) and shares the batch between endpoints
round-robin, so a hanging endpoint holds only its own share of the dispatcher. An endpoint that keeps
failing trips its breaker (:class:`~receipts.webhooks.records.Breaker`): it is paused, its messages
wait (they are not claimed, so their attempts are not used up), and once the cool-down is over one
trial message is claimed; recording its success closes the breaker, a failure pauses it for longer.

Recording writes every attempt of a batch with one INSERT and moves each message on with one UPDATE,
fenced by the lease it was claimed with: if the lease ran out and another dispatcher took the
message, the late result is logged as an attempt but does not overwrite the newer state. Leases,
due times and attempt times are the database's clock; an attempt's time is the database's ``now()``
when it is recorded, less how long ago (by the dispatcher's monotonic clock) it was sent.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from receipts.db import Query, Steps, operation, transaction
from receipts.records import PG_ISO_FORMAT, iso
from receipts.webhooks.records import Breaker, Claimed, Settled
from receipts.webhooks.secrets import tokens

MAX_REASON = 1000

# A claim is fair between lanes (an endpoint, or a call's own webhook_url): it takes at most ``cap``
# messages of a lane, less what this dispatcher already has in flight there (``lanes``/``held``), and
# round-robins between lanes (every lane's oldest first, then every lane's second...), so one busy
# endpoint cannot fill the batch.
#
# It is driven by the partial index on pending messages (endpoint_id, next_attempt_at): a loose index
# scan lists the endpoints with pending messages (one probe each, however many they have), and each
# one that is neither at its cap nor paused shows its oldest due message (one more probe); of those,
# the ``limit`` endpoints whose oldest is oldest give their oldest due messages. An endpoint's
# backlog, however long, costs a claim nothing when it cannot take from it. Messages of a
# call's own webhook_url (no endpoint) are scanned oldest first up to ``scan`` and ranked per URL.
#
# A paused endpoint whose cool-down is over lets one message through (its trial): the UPDATE of
# ``trials`` moves its paused_until past the lease first, so of concurrent claims only one sends it.
# (FOR UPDATE is not allowed with a window function: candidates are ranked first, then locked.)
CLAIM = """
WITH RECURSIVE held AS (
    SELECT * FROM unnest(%(lanes)s::text[], %(held)s::int[]) AS h(lane, n)
), endpoints_pending AS (
    (SELECT endpoint_id FROM webhook_messages WHERE status = 'pending' AND endpoint_id IS NOT NULL
     ORDER BY endpoint_id LIMIT 1)
    UNION ALL
    SELECT (SELECT m.endpoint_id FROM webhook_messages m
            WHERE m.status = 'pending' AND m.endpoint_id > p.endpoint_id ORDER BY m.endpoint_id LIMIT 1)
    FROM endpoints_pending p WHERE p.endpoint_id IS NOT NULL
), open_endpoints AS (
    SELECT p.endpoint_id AS lane, e.paused_until IS NOT NULL AS trial,
           CASE WHEN e.paused_until IS NOT NULL THEN 1 ELSE %(cap)s END - coalesce(h.n, 0) AS room
    FROM endpoints_pending p
    LEFT JOIN webhook_endpoints e ON e.id = p.endpoint_id
    LEFT JOIN held h ON h.lane = p.endpoint_id
    WHERE p.endpoint_id IS NOT NULL AND (e.paused_until IS NULL OR e.paused_until <= now())
), heads AS (  -- the endpoints whose oldest due message is oldest, as many as a claim can serve
    SELECT o.*, d.next_attempt_at AS head
    FROM open_endpoints o CROSS JOIN LATERAL (
        SELECT m.next_attempt_at FROM webhook_messages m
        WHERE m.endpoint_id = o.lane AND m.status = 'pending' AND m.next_attempt_at <= now()
          AND (m.locked_until IS NULL OR m.locked_until <= now())
        ORDER BY m.next_attempt_at LIMIT 1
    ) d
    WHERE o.room > 0
    ORDER BY d.next_attempt_at LIMIT %(limit)s
), due AS (
    SELECT c.id, o.lane, c.endpoint_id, c.next_attempt_at, o.trial,
           row_number() OVER (PARTITION BY o.lane ORDER BY c.next_attempt_at, c.id) AS rank, 0 AS n
    FROM heads o CROSS JOIN LATERAL (
        SELECT m.id, m.endpoint_id, m.next_attempt_at FROM webhook_messages m
        WHERE m.endpoint_id = o.lane AND m.status = 'pending' AND m.next_attempt_at <= now()
          AND (m.locked_until IS NULL OR m.locked_until <= now())
        ORDER BY m.next_attempt_at LIMIT least(o.room, %(limit)s)
    ) c
    UNION ALL
    SELECT u.id, u.url, NULL, u.next_attempt_at, false,
           row_number() OVER (PARTITION BY u.url ORDER BY u.next_attempt_at, u.id), coalesce(h.n, 0)
    FROM (SELECT id, url, next_attempt_at FROM webhook_messages m
          WHERE m.endpoint_id IS NULL AND m.status = 'pending' AND m.next_attempt_at <= now()
            AND (m.locked_until IS NULL OR m.locked_until <= now())
            AND NOT EXISTS (SELECT 1 FROM held WHERE held.lane = m.url AND held.n >= %(cap)s)
          ORDER BY m.next_attempt_at LIMIT %(scan)s) u
    LEFT JOIN held h ON h.lane = u.url
), trials AS (
    UPDATE webhook_endpoints e SET paused_until = now() + make_interval(secs => %(lease_s)s)
    WHERE e.id IN (SELECT endpoint_id FROM due WHERE trial)
      AND e.paused_until IS NOT NULL AND e.paused_until <= now()
    RETURNING e.id
), picked AS (
    SELECT id, trial FROM due
    WHERE CASE WHEN trial THEN endpoint_id IN (SELECT id FROM trials) ELSE rank <= %(cap)s - n END
    ORDER BY rank, trial DESC, next_attempt_at LIMIT %(limit)s
), locked AS (
    SELECT id FROM webhook_messages
    WHERE id IN (SELECT id FROM picked) AND status = 'pending' AND (locked_until IS NULL OR locked_until <= now())
    FOR UPDATE SKIP LOCKED
), m AS (
    UPDATE webhook_messages SET locked_until = now() + make_interval(secs => %(lease_s)s)
    FROM locked WHERE webhook_messages.id = locked.id
    RETURNING webhook_messages.id, webhook_messages.tenant_id, webhook_messages.endpoint_id, webhook_messages.url,
              webhook_messages.event_type, webhook_messages.receipt_id, webhook_messages.payload,
              webhook_messages.attempts, webhook_messages.locked_until, webhook_messages.traceparent
)
SELECT m.id, m.tenant_id, m.endpoint_id, m.url, m.event_type, m.receipt_id, m.payload, m.attempts, m.locked_until,
       e.id IS NOT NULL, e.url, e.enabled, e.disabled_reason, e.secrets, t.webhook_secrets, now(), m.traceparent,
       picked.trial
FROM m JOIN picked ON picked.id = m.id
       LEFT JOIN webhook_endpoints e ON e.id = m.endpoint_id
       LEFT JOIN tenants t ON m.endpoint_id IS NULL AND t.id = m.tenant_id
ORDER BY m.id"""
SCAN_FACTOR = 4  # due messages a claim looks at, per message it may take

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

# A success ends the failure streak and closes the breaker.
HEALTHY = """
UPDATE webhook_endpoints SET failing_since = NULL, consecutive_failures = 0, paused_until = NULL, pauses = 0
WHERE id = ANY(%(ids)s) AND (failing_since IS NOT NULL OR consecutive_failures > 0 OR paused_until IS NOT NULL)"""
# Failures lengthen the streak; the breaker opens when the streak reaches ``after`` on an endpoint that is
# not paused, or when a trial failed: paused for the cool-down, doubled with each opening in a row.
# Failures of messages sent before it opened only lengthen the streak.
_OPENS = "(e.paused_until IS NULL AND e.consecutive_failures + u.failures >= %(after)s) OR u.trial"
_COOLDOWN = "least(%(max_s)s, %(cooldown_s)s * power(2, least(e.pauses, 30)))"
BREAK = f"""
UPDATE webhook_endpoints e SET
    consecutive_failures = e.consecutive_failures + u.failures,
    paused_until = CASE WHEN {_OPENS} THEN now() + make_interval(secs => {_COOLDOWN}) ELSE e.paused_until END,
    pauses = CASE WHEN {_OPENS} THEN e.pauses + 1 ELSE e.pauses END
FROM unnest(%(ids)s::text[], %(failures)s::int[], %(trial)s::bool[]) AS u(id, failures, trial)
WHERE e.id = u.id"""
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
     endpoint_exists, endpoint_url, enabled, disabled_reason, endpoint_ring, tenant_ring, now, traceparent,
     trial) = row
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
                   refusal=refusal, traceparent=traceparent, trial=bool(trial))


@operation
def claim(limit: int, *, lease_s: float, lane_cap: int | None = None,
          held: Mapping[str, int] | None = None) -> Steps[list[Claimed]]:
    """Lease up to ``limit`` due messages with everything needed to send them.

    At most ``lane_cap`` (default: no cap but ``limit``) per lane, less what ``held`` says is in flight
    there already, taken round-robin between lanes, oldest due first within each. Paused endpoints
    give nothing, or their one trial once the cool-down is over.
    """
    cap = limit if lane_cap is None else lane_cap
    busy = {lane: count for lane, count in (held or {}).items() if count > 0}
    rows = yield Query(CLAIM, {"limit": limit, "lease_s": lease_s, "cap": cap, "scan": max(limit * SCAN_FACTOR, 100),
                               "lanes": list(busy), "held": list(busy.values())}, fetch="all")
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
def record(results: Sequence[Settled], *, disable_after_s: float, breaker: Breaker | None = None) -> Steps[None]:
    """Write the attempts, move the messages on (fenced by their lease) and update endpoint health.

    ``disable_after_s``: how long an endpoint may fail without a break before it is disabled;
    ``breaker``: when one that keeps failing is paused (by default :class:`Breaker`'s defaults).
    """
    if not results:
        return
    yield Query(ATTEMPTS, _columns(results, time.monotonic()), fetch="none")
    yield Query(MOVE_ON, {"id": [r.message_id for r in results], "lease": [r.lease for r in results],
                          "status": [r.status for r in results], "attempts": [r.attempts for r in results],
                          "retry_in_s": [r.retry_in_s for r in results]}, fetch="none")
    yield from _health(results, disable_after_s, breaker or Breaker())


def _health(results: Sequence[Settled], disable_after_s: float, breaker: Breaker) -> Steps[None]:
    """Clear the failure streak of endpoints that answered 2xx; start or lengthen it (opening the breaker),
    or disable, for the others."""
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
    if breaker.failures > 0:
        counts = Counter(r.endpoint_id for r in results if r.health == "failing")
        trials = {r.endpoint_id for r in results if r.health == "failing" and r.trial}
        yield Query(BREAK, {"ids": failing, "failures": [counts[i] for i in failing],
                            "trial": [i in trials for i in failing], "after": breaker.failures,
                            "cooldown_s": breaker.cooldown_s, "max_s": breaker.max_s}, fetch="none")
    overdue = yield Query(OVERDUE, {"ids": failing, "after_s": disable_after_s}, fetch="all")
    for endpoint_id, since, now in overdue:
        last = last_failure[endpoint_id]
        detail = last.error or f"HTTP {last.status_code}"
        reason = f"every delivery failed from {iso(since)} to {iso(now)}; last error: {detail}"
        yield Query(DISABLE, {"id": endpoint_id, "reason": reason[:MAX_REASON]}, fetch="none")
