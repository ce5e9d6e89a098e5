"""The Celery app of this installation: the workers' tasks plus every other package's tasks.

This is where the sibling packages meet (they never import each other).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from receipts.db import Database
from receipts.settings import Settings
from receipts.webhooks.nudges import Nudger
from webhooks.tasks import install as install_webhooks
from workers.celery_app import WorkerApp, make_celery
from workers.kinds import build_kinds


def build_celery(settings: Settings, *, db: Database | None = None,
                 metrics_registry: CollectorRegistry | None = None) -> WorkerApp:
    """The Celery app a ``toolrelay worker``/``beat``/``dev`` process runs, with its services.

    Its figures (the worker's, the sweeper's, the dispatcher's) go to ``metrics_registry``.
    """
    worker = make_celery(settings, db=db, kinds=build_kinds,  # + api_call, integration, system
                         metrics_registry=metrics_registry)
    # Webhooks: the deliver task and its beat entry; transitions that wrote outbox rows nudge the dispatcher.
    install_webhooks(worker.app, settings, db=lambda: worker.services.db,
                     metrics_registry=worker.services.metrics_registry)
    if db is None:  # a database handed in belongs to a process (dev) that subscribed its own nudger
        worker.services.db.subscribe(Nudger(worker.app))
    return worker
