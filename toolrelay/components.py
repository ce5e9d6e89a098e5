"""The Celery app of this installation: the workers' tasks plus every other package's tasks.

This is where the sibling packages meet (they never import each other).
"""

from __future__ import annotations

from celery import Celery

from receipts.nudges import Nudger
from receipts.settings import Settings
from receipts.store import ReceiptStore
from webhooks.tasks import install as install_webhooks
from workers.celery_app import make_celery
from workers.kinds import build_kinds


def build_celery(settings: Settings, *, store: ReceiptStore | None = None) -> Celery:
    """The Celery app a ``toolrelay worker``/``beat``/``dev`` process runs."""
    app = make_celery(settings, store=store, kinds=build_kinds)  # + api_call, integration, system
    services = app.toolrelay  # type: ignore[attr-defined]
    # Webhooks: the deliver task and its beat entry; transitions that wrote outbox rows nudge the dispatcher.
    install_webhooks(app, settings, db=lambda: services.db)
    services.store.subscribe(Nudger(app))
    return app
