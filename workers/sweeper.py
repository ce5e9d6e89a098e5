"""The sweeper task body: settle what the database says is overdue, and re-send lost messages."""

from __future__ import annotations

import logging

from agents.batches import complete
from receipts.db import Database
from receipts.messages import TaskSender, publish_execute, publish_run
from receipts.settings import Settings
from receipts.store import batches, runs
from receipts.store.sweeps import SweepReport, sweep
from workers.metrics import WorkerMetrics
from workers.runs import cancel_open_calls

log = logging.getLogger(__name__)


def sweep_once(db: Database, sender: TaskSender, settings: Settings, *, after_restart: bool = False,
               metrics: WorkerMetrics | None = None) -> SweepReport:
    """One sweep: expire, reclaim, and publish pending receipts whose message went missing (counted in
    ``metrics``, if given)."""
    report = db.run(sweep(republish_after_s=settings.republish_after_s, batch=settings.sweep_batch,
                          after_restart=after_restart))
    for receipt in report.republished:
        publish_execute(sender, receipt, grace_s=settings.lease_grace_s)
    # Batches whose last call ended without the batch completing (its completer died, or the sweep
    # itself just ended the call).
    orphaned = db.run(batches.orphaned())
    for batch_id in orphaned:
        db.run(complete(batch_id))  # a run it resumes is published below, with the runs to re-send
    if metrics is not None:
        metrics.swept(report, len(orphaned))
    swept = db.run(runs.sweep(republish_after_s=settings.republish_after_s, after_restart=after_restart))
    for run in swept.expired:  # past their deadline: their tool calls still open are canceled
        cancel_open_calls(db, run)
    for run in swept.republish:
        publish_run(sender, run.id)
    if report.total:
        log.info("sweep: republished %d, reclaimed %d, lost %d (outcome unknown or out of attempts), expired %d",
                 len(report.republished), report.reclaimed, report.lost, report.expired)
    return report
