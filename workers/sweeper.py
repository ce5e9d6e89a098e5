"""The sweeper: settle what the database says is overdue, and re-send lost messages.

Where it runs, and why there: a sweep must never wait behind the work it rescues (DESIGN.md,
guarantee 1: a deadline holds whatever is queued). It used to be a Celery task that beat enqueued,
and it waited in the queue of the tool calls: behind a backlog of minutes of work a call with a
three-second deadline was still ``pending`` long after it. A queue of its own would not be enough:
a worker takes a message only when one of its pool processes is free (prefetch 1, late acks), so
however a worker ranks its queues, a sweep waits until a tool call ends when every process is busy
with one; only a process kept free for sweeps would do, and that is a process of the sweeper's own.

So the sweeper runs on a thread of its own in the beat process (:class:`Sweeper`, started when beat
starts; and in ``toolrelay dev``), which schedules work but never runs tool calls: nothing queued
can delay a sweep. Sweeps are safe to run side by side (each statement picks its rows ``FOR UPDATE
SKIP LOCKED`` and every transition is compare-and-set), so a second beat only repeats queries.
The ``toolrelay.sweep`` task still exists, to sweep on demand (``celery call toolrelay.sweep``).
"""

from __future__ import annotations

import logging
import threading
import time

from opentelemetry import trace

from agents.batches import complete
from receipts.db import Database
from receipts.errors import Unavailable
from receipts.messages import TaskSender, publish_execute, publish_run
from receipts.settings import Settings
from receipts.store import batches, runs
from receipts.store.sweeps import SweepReport, sweep
from workers.metrics import WorkerMetrics
from workers.runs import cancel_open_calls

log = logging.getLogger(__name__)
tracer = trace.get_tracer("toolrelay.workers")
SWEEP_SPAN = "toolrelay.sweep"


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


class Sweeper:
    """Sweeps every ``TOOLRELAY_SWEEP_INTERVAL_S`` on a thread of its own until stopped."""

    def __init__(self, db: Database, sender: TaskSender, settings: Settings, *,
                 metrics: WorkerMetrics | None = None) -> None:
        self.db = db
        self.sender = sender
        self.settings = settings
        self.metrics = metrics
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self, *, after_restart: bool = False) -> SweepReport | None:
        """One sweep; None when it failed (logged: the next one retries)."""
        try:
            with tracer.start_as_current_span(SWEEP_SPAN):  # each sweep a trace of its own
                return sweep_once(self.db, self.sender, self.settings, after_restart=after_restart,
                                  metrics=self.metrics)
        except Unavailable as exc:  # the database is down: say so once a sweep, without a traceback
            log.warning("sweep skipped: %s", exc)
        except Exception:  # noqa: BLE001 - keep sweeping; the next pass retries
            log.exception("sweep failed")
        return None

    def run_forever(self) -> None:
        """Sweep until :meth:`stop`, one interval between the end of a sweep and the next."""
        while True:
            # time.sleep, not a timed Event.wait: under libfaketime (a process whose clock is set off)
            # a timed wait on a lock never returns; a stop that takes up to one interval costs nothing.
            time.sleep(self.settings.sweep_interval_s)
            if self._stop.is_set():
                return
            self.run_once()

    def start(self) -> threading.Thread:
        """Sweep on a daemon thread (a process ending need not wait for it); returns that thread."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self.run_forever, name="sweeper", daemon=True)
            self._thread.start()
            log.info("sweeper: sweeping every %g s on a thread of this process", self.settings.sweep_interval_s)
        return self._thread

    def stop(self) -> None:
        self._stop.set()
