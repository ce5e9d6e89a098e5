"""The dispatcher's figures: each delivery attempt's outcome, and how long the receiver took to answer."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from receipts.webhooks.records import DELIVERED, FAILED, PENDING

OUTCOMES = {DELIVERED: "delivered", PENDING: "retrying", FAILED: "failed"}
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0)


class DeliveryMetrics:
    """Webhook delivery figures, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.attempts = Counter("toolrelay_webhook_deliveries", "Webhook delivery attempts by outcome: delivered, "
                                "retrying (a later attempt is scheduled), failed (no attempt left, or refused)",
                                ["outcome"], registry=registry)
        self.latency = Histogram("toolrelay_webhook_delivery_seconds", "From sending a delivery to its answer "
                                 "(attempts that were sent)", buckets=LATENCY_BUCKETS, registry=registry)
        for outcome in OUTCOMES.values():
            self.attempts.labels(outcome)

    def attempted(self, status: str, latency_ms: float | None) -> None:
        """Count one attempt that left its message ``status`` (and took ``latency_ms``, if it was sent)."""
        self.attempts.labels(OUTCOMES.get(status, status)).inc()
        if latency_ms is not None:
            self.latency.observe(latency_ms / 1000)
