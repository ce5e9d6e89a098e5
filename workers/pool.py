"""The prefork pool of toolrelay's workers: Celery's, surviving a broker reconnect just after a pool
process exited.

When a pool process exits (killed at the hard time limit, or by anyone), Celery's pool stops watching
it at once (its sentinel becomes None) and removes it from the pool once it is joined. A broker
reconnect in between registers every pool process with the worker's event loop again, that one
included: Celery 5.7 hands its None to kombu's hub, which raises ValueError since kombu 5.7, and
Celery catches only OSError and AttributeError there, so the worker exits ("Unrecoverable error:
file descriptor is None") just as the broker came back. Here a process already untracked is left
out: it is on its way out, and the process replacing it is watched when it starts.

``make_celery`` sets this as the default pool (``worker_pool``); ``--pool prefork`` on the command
line means it too (Celery reads the default as "the configured pool"). Remove it once Celery catches
what kombu raises.
"""

from __future__ import annotations

from typing import Any

from celery.concurrency import asynpool, prefork

POOL = f"{__name__}:TaskPool"


class AsynPool(asynpool.AsynPool):  # type: ignore[misc]
    def _track_child_process(self, proc: Any, hub: Any) -> None:
        if getattr(proc, "_sentinel_poll", 0) is None:  # untracked when it exited: not to be watched again
            return
        super()._track_child_process(proc, hub)


class TaskPool(prefork.TaskPool):  # type: ignore[misc]
    Pool = AsynPool
