"""The sweeper task body: settle what the database says is overdue, and re-send lost messages."""

from __future__ import annotations

import logging

from agents.batches import render
from receipts.db import Database
from receipts.messages import TaskSender, publish_execute
from receipts.settings import Settings
from receipts.store import batches
from receipts.store.sweeps import SweepReport, sweep

log = logging.getLogger(__name__)


def sweep_once(db: Database, sender: TaskSender, settings: Settings, *, after_restart: bool = False) -> SweepReport:
    """One sweep: expire, reclaim, and publish pending receipts whose message went missing."""
    report = db.run(sweep(republish_after_s=settings.republish_after_s, batch=settings.sweep_batch,
                          after_restart=after_restart))
    for receipt in report.republished:
        publish_execute(sender, receipt, grace_s=settings.lease_grace_s)
    # Batches whose last call ended without the batch completing (its completer died, or the sweep
    # itself just ended the call).
    for batch_id in db.run(batches.orphaned()):
        db.run(batches.complete(batch_id, render))
    if report.total:
        log.info("sweep: republished %d, reclaimed %d, lost %d (outcome unknown or out of attempts), expired %d",
                 len(report.republished), report.reclaimed, report.lost, report.expired)
    return report
