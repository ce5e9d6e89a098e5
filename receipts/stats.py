"""Backlog figures for monitoring: what is waiting, for how long, and how much webhook work is due."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC

from sqlalchemy import func, select

from receipts import states
from receipts.db import Database, utcnow
from receipts.tables import receipts, webhook_messages


@dataclass(frozen=True, slots=True)
class Backlog:
    active: dict[str, int]  # non-terminal receipts by status
    oldest_pending_s: float  # age of the oldest pending receipt that is due (0 when none)
    webhook_messages_due: int


def backlog(db: Database) -> Backlog:
    """Counts over the non-terminal receipts only (partial indexes), so a scrape stays cheap."""
    now = utcnow()
    with db.read() as conn:
        # One count per status, so each is answered from that status's partial index.
        rows = [
            (status, conn.execute(select(func.count()).where(receipts.c.status == status)).scalar())
            for status in sorted(states.ACTIVE)
        ]
        oldest = conn.execute(
            select(func.min(receipts.c.available_at)).where(
                receipts.c.status == states.PENDING, receipts.c.available_at <= now
            )
        ).scalar()
        messages = webhook_messages.c
        due = conn.execute(
            select(func.count()).where(messages.status == "pending", messages.next_attempt_at <= now)
        ).scalar()
    active = {status: 0 for status in sorted(states.ACTIVE)}
    active.update({status: int(count or 0) for status, count in rows})
    if oldest is not None and oldest.tzinfo is None:  # aggregate results can lose the column type
        oldest = oldest.replace(tzinfo=UTC)
    age = (now - oldest).total_seconds() if oldest is not None else 0.0
    return Backlog(active=active, oldest_pending_s=max(0.0, age), webhook_messages_due=int(due or 0))
