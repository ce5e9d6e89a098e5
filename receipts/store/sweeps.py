"""What the sweeper finds and settles: lost messages, expired leases, passed deadlines.

The receipt row is the truth and the broker message only a hint (DESIGN.md, guarantee 1). A sweep
finds the receipts whose hint went missing and settles them, a batch per statement, with the same
timeline and outbox writes as every other transition. Each statement picks its rows ``FOR UPDATE
SKIP LOCKED`` and re-checks them under that lock, so a sweeper racing a worker either sees the
worker's committed write (and leaves the row alone) or takes the row first, and the worker's fenced
write then finds nothing to update. Every time is the database's ``now()``: a host's clock cannot
make a sweep reclaim a live attempt or expire a call early.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from receipts import states
from receipts.db import Announce, Query, Steps, operation
from receipts.records import RECEIPT_COLUMNS, Receipt
from receipts.store.statements import COLUMNS, transition

ACTOR = "sweeper"
_RETURNING = f"RETURNING {', '.join(f'receipts.{c}' for c in RECEIPT_COLUMNS)}, old.status AS before_status"
_ERROR_DETAIL = "jsonb_build_object('error', r.error)"


def _error_sql(code: str, message_sql: str, retryable: str) -> str:
    return (f"jsonb_build_object('code', '{code}', 'message', {message_sql}, 'retryable', {retryable}, "
            "'retry_after_ms', NULL, 'details', '{}'::jsonb)")


# pending or waiting past the call's deadline -> failed. A pending call waiting for a retry keeps
# the error of its last attempt (no longer retryable); any other ends "expired".
EXPIRE = transition(f"""
WITH old AS (
    SELECT id, status FROM receipts
    WHERE status IN ('pending', 'waiting') AND deadline_at <= now()
    ORDER BY deadline_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
)
UPDATE receipts SET status = 'failed', updated_at = now(), finished_at = now(), lease_expires_at = NULL,
    error = CASE WHEN old.status = 'pending' AND receipts.error IS NOT NULL
                 THEN receipts.error || '{{"retryable": false}}'::jsonb
                 ELSE {_error_sql("expired", '''CASE WHEN old.status = 'waiting' AND receipts.approval IS NOT NULL
                                                     THEN 'the approval timed out: nobody approved or rejected the call'
                                                     WHEN old.status = 'waiting'
                                                     THEN 'the call''s deadline passed: no result was posted'
                                                     ELSE 'the call''s deadline passed: it never ran to completion'
                                                END''', "false")} END,
    approval = CASE WHEN old.status = 'waiting' AND receipts.approval IS NOT NULL
                    THEN receipts.approval || '{{"state": "expired"}}'::jsonb ELSE receipts.approval END
FROM old WHERE receipts.id = old.id
{_RETURNING}""", announce=True, detail=_ERROR_DETAIL)

_LOST_MESSAGE = "'the worker running attempt ' || receipts.attempt || ' stopped before reporting a result'"
_LEASE_OVER = {False: "lease_expires_at <= now()", True: "TRUE"}

# running with its lease over: the worker died. A read or idempotent tool with attempts and time
# left goes back to pending (due now, unpublished, so the same sweep sends it) ...
RECLAIM = {any_lease: transition(f"""
WITH old AS (
    SELECT id, status FROM receipts
    WHERE status = 'running' AND {over}
      AND (effect = 'read' OR idempotent) AND attempt < max_attempts AND deadline_at > now()
    ORDER BY id LIMIT %(batch)s FOR UPDATE SKIP LOCKED
)
UPDATE receipts SET status = 'pending', updated_at = now(), available_at = now(), published_at = NULL,
    lease_expires_at = NULL, error = {_error_sql("internal", _LOST_MESSAGE, "true")}
FROM old WHERE receipts.id = old.id
{_RETURNING}""", announce=False, detail=_ERROR_DETAIL) for any_lease, over in _LEASE_OVER.items()}

# ... and the rest fails: a write that is not idempotent may or may not have had its effect, so it
# ends outcome_unknown and is never run again (DESIGN.md, guarantee 3); a safe one out of attempts
# or time ends with the internal error.
LOSE = {any_lease: transition(f"""
WITH old AS (
    SELECT id, status FROM receipts
    WHERE status = 'running' AND {over}
      AND NOT ((effect = 'read' OR idempotent) AND attempt < max_attempts AND deadline_at > now())
    ORDER BY id LIMIT %(batch)s FOR UPDATE SKIP LOCKED
)
UPDATE receipts SET status = 'failed', updated_at = now(), finished_at = now(), lease_expires_at = NULL,
    error = CASE WHEN receipts.effect = 'read' OR receipts.idempotent
                 THEN {_error_sql("internal", _LOST_MESSAGE, "false")}
                 ELSE {_error_sql("outcome_unknown", _LOST_MESSAGE, "false")} END
FROM old WHERE receipts.id = old.id
{_RETURNING}""", announce=True, detail=_ERROR_DETAIL) for any_lease, over in _LEASE_OVER.items()}

# Pending receipts whose message is missing: never sent, or sent long ago and not claimed. Marked
# published now, so the next sweep leaves them alone for ``stale_s``.
REPUBLISH = f"""
UPDATE receipts SET published_at = now()
WHERE id IN (
    SELECT id FROM receipts
    WHERE status = 'pending' AND available_at <= now()
      AND (published_at IS NULL OR published_at <= now() - make_interval(secs => %(stale_s)s))
    ORDER BY available_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
)
RETURNING {COLUMNS}"""

# After a restart of a process that owned its broker (the embedded mode), retries scheduled for
# later were queued with a countdown that died with it: mark them unsent, so the sweep after they
# fall due sends them.
FORGET_SCHEDULED = "UPDATE receipts SET published_at = NULL WHERE status = 'pending' AND available_at > now()"


@dataclass(frozen=True, slots=True)
class SweepReport:
    republished: list[Receipt]
    reclaimed: int
    lost: int
    expired: int

    @property
    def total(self) -> int:
        return len(self.republished) + self.reclaimed + self.lost + self.expired


def _settle(statement: str, batch: int, target: str) -> Steps[int]:
    event_type = states.EVENT_TYPES.get(target)
    rows = yield Query(statement, {"batch": batch, "actor": ACTOR, "event_type": event_type,
                                   "event_pattern": f"%,{event_type},%"}, fetch="all")
    for row in rows:
        yield Announce(Receipt.from_values(row), row[-1])
    return len(rows)


@operation
def sweep(*, republish_after_s: float, batch: int = 500, after_restart: bool = False) -> Steps[SweepReport]:
    """Expire, reclaim, then collect pending receipts whose message must be sent again (to publish).

    ``after_restart`` is for a single process that owns its database and broker (the embedded
    mode) coming back up: every lease it held and every message it had queued died with it, so
    running receipts are reclaimed and pending ones re-sent at once instead of after a timeout.
    """
    expired = yield from _settle(EXPIRE, batch, states.FAILED)
    reclaimed = yield from _settle(RECLAIM[after_restart], batch, states.PENDING)
    lost = yield from _settle(LOSE[after_restart], batch, states.FAILED)
    params: dict[str, Any] = {"batch": batch, "stale_s": 0.0 if after_restart else republish_after_s}
    if after_restart:
        yield Query(FORGET_SCHEDULED, fetch="none")
    rows = yield Query(REPUBLISH, params, fetch="all")
    return SweepReport([Receipt.from_values(row) for row in rows], reclaimed, lost, expired)
