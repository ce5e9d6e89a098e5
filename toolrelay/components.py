"""The Celery app of this installation: the workers' tasks plus every other package's tasks.

This is where the sibling packages meet (they never import each other).
"""

from __future__ import annotations

from celery import Celery

from receipts.settings import Settings
from receipts.store import ReceiptStore
from workers.celery_app import make_celery


def build_celery(settings: Settings, *, store: ReceiptStore | None = None) -> Celery:
    """The Celery app a ``toolrelay worker``/``beat``/``dev`` process runs."""
    return make_celery(settings, store=store)
