"""What the sweeper finds and settles: lost messages, expired leases, passed deadlines.

The receipt row is the truth and the broker message only a hint (DESIGN.md, guarantee 1). These
queries find the receipts whose hint went missing and settle them with the same fenced transitions
the workers use, so a sweeper racing a slow worker can never overwrite what the worker wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, or_, select, update

from receipts import states
from receipts.db import utcnow
from receipts.records import Receipt
from receipts.store import Outcome, ReceiptStore, error
from receipts.tables import receipts

ACTOR = "sweeper"


@dataclass(frozen=True, slots=True)
class SweepReport:
    republished: list[Receipt]
    reclaimed: int
    lost: int
    expired: int

    @property
    def total(self) -> int:
        return len(self.republished) + self.reclaimed + self.lost + self.expired


class Sweeper:
    """One pass over the receipts table; call :meth:`sweep` periodically."""

    def __init__(self, store: ReceiptStore, *, republish_after_s: float, batch: int = 500) -> None:
        self.store = store
        self.republish_after = timedelta(seconds=republish_after_s)
        self.batch = batch

    def sweep(self, now: datetime | None = None, *, after_restart: bool = False) -> SweepReport:
        """Expire, reclaim, then collect pending receipts whose message must be sent again.

        ``after_restart`` is for a single process that owns its database and broker (the embedded
        mode) coming back up: every lease it held and every message it had queued died with it, so
        running receipts are reclaimed and pending ones re-sent at once instead of after a timeout.
        """
        now = now or utcnow()
        expired = self._expire(now)
        reclaimed, lost = self._reclaim(now, any_lease=after_restart)
        return SweepReport(self._due_for_publish(now, all_pending=after_restart), reclaimed, lost, expired)

    def _select(self, *conditions: object) -> list[Receipt]:
        with self.store.db.read() as conn:
            rows = conn.execute(
                select(receipts).where(and_(*conditions)).order_by(receipts.c.id).limit(self.batch)  # type: ignore[arg-type]
            ).mappings().all()
        return [Receipt.from_row(row) for row in rows]

    def _expire(self, now: datetime) -> int:
        """pending or waiting past the call's deadline -> failed/expired."""
        count = 0
        for receipt in self._select(
            receipts.c.status.in_([states.PENDING, states.WAITING]), receipts.c.deadline_at <= now
        ):
            what = "no result was posted" if receipt.status == states.WAITING else "it never ran to completion"
            outcome = Outcome(states.FAILED, error=error("expired", f"the call's deadline passed: {what}"))
            if receipt.status == states.PENDING and receipt.error:
                outcome = Outcome(states.FAILED, error={**receipt.error, "retryable": False})
            if self.store.finish(receipt.id, receipt.attempt, outcome, actor=ACTOR, from_status=receipt.status):
                count += 1
        return count

    def _reclaim(self, now: datetime, *, any_lease: bool = False) -> tuple[int, int]:
        """running with an expired lease: the worker died. Retry what is safe, fail the rest.

        A read or idempotent tool goes back to pending (if attempts and time remain). A write that
        is not idempotent may or may not have had its effect: it ends ``outcome_unknown`` and is
        never run again (DESIGN.md, guarantee 3).
        """
        reclaimed = lost = 0
        lease_over = receipts.c.id.is_not(None) if any_lease else receipts.c.lease_expires_at <= now
        for receipt in self._select(receipts.c.status == states.RUNNING, lease_over):
            lost_error = error(
                "outcome_unknown" if not receipt.retry_safe else "internal",
                f"the worker running attempt {receipt.attempt} stopped before reporting a result",
                retryable=receipt.retry_safe,
            )
            can_retry = (
                receipt.retry_safe and receipt.attempt < receipt.max_attempts and receipt.deadline_at > now
            )
            if can_retry:
                # Due as of this pass's clock, so _due_for_publish re-sends it in the same pass.
                if self.store.retry_later(receipt.id, receipt.attempt, lost_error, delay_s=0,
                                          published=False, actor=ACTOR, now=now):
                    reclaimed += 1
            elif self.store.finish(receipt.id, receipt.attempt,
                                   Outcome(states.FAILED, error={**lost_error, "retryable": False}), actor=ACTOR):
                lost += 1
        return reclaimed, lost

    def _due_for_publish(self, now: datetime, *, all_pending: bool = False) -> list[Receipt]:
        """Pending receipts whose message is missing: never sent, or sent long ago and not claimed.

        Marks them published now, so the next pass leaves them alone for ``republish_after``.
        """
        stale = now if all_pending else now - self.republish_after
        if all_pending:
            # Retries scheduled for later were queued with a countdown that died with the process:
            # mark them unsent, so the pass after they fall due sends them at once.
            with self.store.db.transaction() as conn:
                conn.execute(
                    update(receipts)
                    .where(receipts.c.status == states.PENDING, receipts.c.available_at > now)
                    .values(published_at=None)
                )
        unsent = and_(
            receipts.c.status == states.PENDING,
            receipts.c.available_at <= now,
            or_(receipts.c.published_at.is_(None), receipts.c.published_at <= stale),
        )
        due = select(receipts.c.id).where(unsent).order_by(receipts.c.id).limit(self.batch)
        with self.store.db.transaction() as conn:
            # One statement picks and marks them; the repeated condition keeps a concurrent sweeper
            # (or a claim) that got there first from being overridden.
            rows = conn.execute(
                update(receipts)
                .where(receipts.c.id.in_(due.scalar_subquery()), unsent)
                .values(published_at=now)
                .returning(*receipts.c)
            ).mappings().all()
        return [Receipt.from_row(row) for row in rows]
