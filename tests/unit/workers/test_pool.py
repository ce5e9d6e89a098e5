"""The workers' prefork pool: Celery's, surviving a broker reconnect just after a pool process exited."""

from __future__ import annotations

import os
from types import SimpleNamespace

from celery import concurrency
from kombu.asynchronous import Hub

from receipts.settings import Settings
from workers.celery_app import make_celery


def tracked(pool_cls: type, process: SimpleNamespace) -> list[int]:
    """The file descriptors the pool has ``hub`` watch for ``process``, as a reconnect re-registers them."""
    pool = pool_cls.Pool.__new__(pool_cls.Pool)  # the method under test uses no other state
    hub = Hub()
    try:
        pool._track_child_process(process, hub)
        return sorted(hub.readers)
    finally:
        hub.close()


def test_a_reconnect_just_after_a_pool_process_exited_does_not_end_the_worker() -> None:
    # A pool process that exits (killed at the hard time limit, say) is untracked at once, its
    # sentinel set to None, and stays in the pool until it is joined. A broker reconnect in between
    # registers every pool process with the event loop again: Celery's pool handed None to kombu's
    # hub, which raises ValueError (kombu 5.7 made it one; Celery 5.7 catches only OSError and
    # AttributeError there), and the worker exited "Unrecoverable error: file descriptor is None".
    pool_cls = concurrency.get_implementation(make_celery(Settings(broker_url="memory://")).app.conf.worker_pool)
    assert tracked(pool_cls, SimpleNamespace(_sentinel_poll=None)) == []
    read, write = os.pipe()
    try:
        assert tracked(pool_cls, SimpleNamespace(_sentinel_poll=read)) == [read]  # a live one still is
    finally:
        os.close(read)
        os.close(write)
