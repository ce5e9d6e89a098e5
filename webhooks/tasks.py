"""The dispatcher as a Celery task on the ``webhooks`` queue, and the beat entry that pumps it.

``toolrelay.webhooks.deliver`` runs the dispatcher until nothing is due (or for at most
``RUN_FOR_S``, then queues itself again). It is triggered three ways, none of which carries data —
the outbox rows are the truth:

* beat, every ``webhook_poll_s`` (retries that come due, anything a nudge missed);
* a nudge right after a transition wrote outbox rows (see :mod:`receipts.nudges`), for low latency;
* itself, when a run ends on time with work left.

Long retry delays live in ``next_attempt_at``; no Celery countdown is ever used here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cache

from celery import Celery
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry

from receipts.db import Database
from receipts.messages import DELIVER_TASK, WEBHOOKS_QUEUE
from receipts.outbound.guard import OutboundGuard
from receipts.secretbox import SecretBox
from receipts.settings import Settings
from receipts.webhooks.nudges import publish_deliver
from receipts.webhooks.records import Breaker
from webhooks.dispatcher import Dispatcher, lease_for
from webhooks.metrics import DeliveryMetrics
from webhooks.policy import RetryPolicy
from webhooks.signing import Signer

log = logging.getLogger(__name__)
tracer = trace.get_tracer("toolrelay.webhooks")

RUN_FOR_S = 10.0
BEAT_ENTRY = "toolrelay-webhooks"


def build_dispatcher(settings: Settings, db: Database, metrics: DeliveryMetrics | None = None) -> Dispatcher:
    """A dispatcher for ``settings`` on ``db`` (counting its attempts in ``metrics``, if given)."""
    box: SecretBox | None = None

    def decrypt(token: str) -> str:
        nonlocal box
        box = box or SecretBox(settings.secret_key)
        return box.decrypt(token)

    return Dispatcher(
        db,
        Signer(decrypt),
        RetryPolicy(settings.retry_schedule_s),
        OutboundGuard(settings.outbound_allow_cidrs),
        timeout_s=settings.webhook_timeout_s,
        batch=settings.webhook_batch,
        concurrency=settings.webhook_concurrency,
        disable_after_s=settings.webhook_disable_after_s,
        metrics=metrics,
        endpoint_concurrency=settings.endpoint_concurrency,
        breaker=Breaker(settings.webhook_breaker_failures, settings.webhook_breaker_cooldown_s,
                        settings.webhook_breaker_max_s),
    )


def install(app: Celery, settings: Settings, db: Callable[[], Database],
            metrics_registry: CollectorRegistry | None = None) -> None:
    """Register the deliver task on ``app`` and add its beat entry.

    ``db`` is called lazily, in the process that runs the task (after any fork). The dispatcher's
    figures go to ``metrics_registry`` (a registry of their own if not given).
    """
    metrics = DeliveryMetrics(metrics_registry or CollectorRegistry(auto_describe=False))
    dispatcher = cache(lambda: build_dispatcher(settings, db(), metrics))
    # Longest a run can take: RUN_FOR_S of claiming, then the in-flight requests (within one lease).
    time_limit = RUN_FOR_S + lease_for(settings.webhook_timeout_s, settings.webhook_batch,
                                       settings.webhook_concurrency) + 30

    @app.task(name=DELIVER_TASK, ignore_result=True, time_limit=time_limit)
    def deliver() -> None:
        with tracer.start_as_current_span(DELIVER_TASK, kind=SpanKind.CONSUMER):
            report = dispatcher().run(max_s=RUN_FOR_S)
        if report.more:
            publish_deliver(app)

    # No expiry on the pump's messages (see the sweep's entry in workers.celery_app): retries that come
    # due are sent only by the pump, so a beat whose clock is behind the workers' must not lose it.
    schedule = dict(app.conf.beat_schedule or {})
    schedule[BEAT_ENTRY] = {"task": DELIVER_TASK, "schedule": settings.webhook_poll_s,
                            "options": {"queue": WEBHOOKS_QUEUE}}
    app.conf.beat_schedule = schedule

