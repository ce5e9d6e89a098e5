"""The figures a worker process records: how long attempts run, and what the sweeper settles.

Calls' ends, start delays and retries are counted where every transition passes
(:mod:`receipts.telemetry.calls`); webhook deliveries by the dispatcher (:mod:`webhooks.metrics`).
In a prefork worker each child process writes its own figures (prometheus_client's multiprocess
mode, set up by ``toolrelay worker``), and the main process serves their sum.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from receipts.store.sweeps import SweepReport
from receipts.telemetry.calls import LATENCY_BUCKETS

SWEEP_ACTIONS = ("republished", "reclaimed", "lost", "expired", "batches_completed")


class WorkerMetrics:
    """A worker's figures, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.run_time = Histogram("toolrelay_tool_call_run_seconds", "How long one attempt of a call ran in the tool",
                                  ["tool"], buckets=LATENCY_BUCKETS, registry=registry)
        self.sweeps = Counter("toolrelay_sweeper_actions", "What the sweeper did: receipts re-published, reclaimed, "
                              "lost (outcome unknown or out of attempts), expired; batches completed", ["action"],
                              registry=registry)
        for action in SWEEP_ACTIONS:  # every series exists from the start, at zero
            self.sweeps.labels(action)

    def swept(self, report: SweepReport, batches_completed: int) -> None:
        """Count what one sweep did."""
        for action, count in (("republished", len(report.republished)), ("reclaimed", report.reclaimed),
                              ("lost", report.lost), ("expired", report.expired),
                              ("batches_completed", batches_completed)):
            if count:
                self.sweeps.labels(action).inc(count)
