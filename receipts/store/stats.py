"""Backlog figures for monitoring: what is waiting, for how long, and how much webhook work is due."""

from __future__ import annotations

from dataclasses import dataclass

from receipts import states
from receipts.db import Query, Steps, operation

# One count per status, so each is answered from that status's partial index; ages in database time.
BACKLOG = f"""
SELECT {", ".join(f"(SELECT count(*) FROM receipts WHERE status = '{s}')" for s in sorted(states.ACTIVE))},
       coalesce(extract(epoch FROM now() - (SELECT min(available_at) FROM receipts
                                            WHERE status = 'pending' AND available_at <= now())), 0)::float8,
       (SELECT count(*) FROM webhook_messages WHERE status = 'pending' AND next_attempt_at <= now())"""


@dataclass(frozen=True, slots=True)
class Backlog:
    active: dict[str, int]  # non-terminal receipts by status
    oldest_pending_s: float  # age of the oldest pending receipt that is due (0 when none)
    webhook_messages_due: int


@operation
def backlog() -> Steps[Backlog]:
    """Counts over the non-terminal receipts only (partial indexes), so a scrape stays cheap."""
    row = yield Query(BACKLOG)
    *counts, oldest, due = row
    return Backlog(active=dict(zip(sorted(states.ACTIVE), map(int, counts), strict=True)),
                   oldest_pending_s=max(0.0, float(oldest)), webhook_messages_due=int(due))
