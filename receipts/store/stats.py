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
# Pending receipts due now, by the queue that serves them: what the workers of each queue have to do.
# From the partial index of pending receipts, so it costs what the backlog is long, never the table.
QUEUES = """
SELECT queue, count(*) FROM receipts WHERE status = 'pending' AND available_at <= now() GROUP BY queue"""


@dataclass(frozen=True, slots=True)
class Backlog:
    active: dict[str, int]  # non-terminal receipts by status
    oldest_pending_s: float  # age of the oldest pending receipt that is due (0 when none)
    webhook_messages_due: int
    queue_depth: dict[str, int]  # pending receipts due now, by queue


@operation
def backlog() -> Steps[Backlog]:
    """Counts over the non-terminal receipts only (partial indexes), so a scrape stays cheap."""
    row = yield Query(BACKLOG)
    *counts, oldest, due = row
    queues = yield Query(QUEUES, fetch="all")
    return Backlog(active=dict(zip(sorted(states.ACTIVE), map(int, counts), strict=True)),
                   oldest_pending_s=max(0.0, float(oldest)), webhook_messages_due=int(due),
                   queue_depth={queue: int(count) for queue, count in queues})
