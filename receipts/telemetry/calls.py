"""What a call's transitions tell the metrics and the logs, observed where every transition passes.

:class:`CallObserver` is a database listener (``Database.subscribe``): each committed transition
announces its receipt, in whichever process made it (a worker's claim, finish or retry, a sweep, a
cancel or a client's result in the gateway). So one place counts every call's end, by tool and
status, and logs it — one INFO line per call, whoever ended it — and the figures summed over every
process are the installation's. Durations come from the receipt's own timestamps, all written by the
database's clock, so they are right whatever host reports them; nothing here reads the database.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Histogram

from receipts import states
from receipts.db import Announce
from receipts.records import Receipt
from receipts.telemetry import logfields

log = logging.getLogger("toolrelay.calls")

# Seconds: from a few milliseconds (a cached read) to an hour (a call's default deadline).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


class CallMetrics:
    """The call figures of one process, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.finished = Counter("toolrelay_tool_calls_finished", "Tool calls that reached a terminal status",
                                ["tool", "status"], registry=registry)
        self.start_delay = Histogram("toolrelay_tool_call_start_delay_seconds",
                                     "From when an attempt was due (acceptance, for the first) to its start",
                                     ["tool"], buckets=LATENCY_BUCKETS, registry=registry)
        self.duration = Histogram("toolrelay_tool_call_duration_seconds",
                                  "End to end: from acceptance to the terminal status", ["tool"],
                                  buckets=LATENCY_BUCKETS, registry=registry)
        self.retries = Counter("toolrelay_tool_call_retries", "Attempts that ended with a retry scheduled",
                               ["tool"], registry=registry)


class CallObserver:
    """Counts and logs the transitions of receipts as they are announced (see the module docstring)."""

    def __init__(self, metrics: CallMetrics) -> None:
        self.metrics = metrics

    def __call__(self, announced: Announce) -> None:
        receipt = announced.subject
        if not isinstance(receipt, Receipt):
            return
        status = receipt.status
        if status == states.RUNNING:
            if receipt.started_at is not None:
                waited = (receipt.started_at - receipt.available_at).total_seconds()
                self.metrics.start_delay.labels(receipt.tool).observe(max(0.0, waited))
        elif status == states.PENDING:
            if receipt.attempt > 0:  # an attempt ended and another one is due later
                self.metrics.retries.labels(receipt.tool).inc()
        elif status in states.TERMINAL:
            self.ended(receipt)

    def ended(self, receipt: Receipt) -> None:
        """Count and log a call that reached its terminal status."""
        finished = receipt.finished_at or receipt.updated_at
        duration_s = max(0.0, (finished - receipt.created_at).total_seconds())
        self.metrics.finished.labels(receipt.tool, receipt.status).inc()
        self.metrics.duration.labels(receipt.tool).observe(duration_s)
        if not log.isEnabledFor(logging.INFO):
            return
        code = (receipt.error or {}).get("code")
        duration_ms = round(duration_s * 1000, 1)
        with logfields.bound(receipt_id=receipt.id, trace_id=receipt.trace_id, tenant=receipt.tenant_id,
                             tool=receipt.tool):
            log.info("receipt %s %s %s%s in %.0f ms (attempt %d)", receipt.id, receipt.tool, receipt.status,
                     f" ({code})" if code else "", duration_ms, receipt.attempt,
                     extra={"status": receipt.status, "duration_ms": duration_ms, "attempt": receipt.attempt,
                            "error_code": code})
