"""Prometheus metrics: this process's counters, plus backlog gauges read from the database at scrape time.

A gateway counts what it accepts and refuses, and (when it owns its database) the calls it ends
itself (cancels, clients' results: :mod:`receipts.telemetry.calls`). The backlog gauges are the
installation's, the same from every gateway: counts of open receipts over their partial indexes,
cheap at scrape time. Latency histograms are recorded as calls move, never computed from the table.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from receipts.db import Database
from receipts.store.stats import backlog


class BacklogCollector(Collector):
    """Receipts waiting by status, pending receipts due by queue, the age of the oldest due pending
    receipt, webhook messages due."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        figures = self.db.run(backlog())
        active = GaugeMetricFamily("toolrelay_receipts_active", "Non-terminal receipts by status", labels=["status"])
        for status, count in figures.active.items():
            active.add_metric([status], count)
        yield active
        depth = GaugeMetricFamily("toolrelay_queue_depth", "Pending receipts due now, by the queue that runs them",
                                  labels=["queue"])
        for queue, count in sorted(figures.queue_depth.items()):
            depth.add_metric([queue], count)
        yield depth
        yield GaugeMetricFamily("toolrelay_oldest_pending_seconds", "Age of the oldest due pending receipt",
                                value=figures.oldest_pending_s)
        yield GaugeMetricFamily("toolrelay_webhook_messages_due", "Webhook messages due for delivery",
                                value=figures.webhook_messages_due)


class GatewayMetrics:
    """The metrics one gateway process exposes on ``/metrics`` (in ``registry``, a new one if not given:
    the embedded mode hands in the registry its worker counts in, so one page shows both)."""

    def __init__(self, db: Database, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=False)
        self.accepted = Counter("toolrelay_tool_calls_accepted", "Tool calls accepted (receipt stored)", ["tool"],
                                registry=self.registry)
        self.replayed = Counter("toolrelay_tool_calls_replayed", "Idempotent replays answered", ["tool"],
                                registry=self.registry)
        self.rejected = Counter("toolrelay_tool_calls_rejected", "Tool calls refused before anything was stored",
                                ["reason"], registry=self.registry)
        self.registry.register(BacklogCollector(db))
        # What /metrics serves: this registry, or, where the process is one of several writing their figures
        # to files (PROMETHEUS_MULTIPROC_DIR: a gateway with --workers), the sum of them all beside the backlog.
        self.scraped = self.registry
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            self.scraped = CollectorRegistry(auto_describe=False)
            multiprocess.MultiProcessCollector(self.scraped)
            self.scraped.register(BacklogCollector(db))
