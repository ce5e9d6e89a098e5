"""The bare Celery baseline's app: one no-op task whose result is when it ran, nothing else.

Run by the benchmark as ``celery -A tests.benchmarks.noop_app worker -P prefork -c N -Q <queue>``,
and built by its clients with :func:`make_app`. Its Celery settings are toolrelay's own
(``celery_config``: late acks, reject on worker loss, prefetch 1, JSON, the visibility timeout),
plus what a Celery client that fetches every result needs and toolrelay does not: a Redis result
backend on the same Redis, under the same key prefix (``global_keyprefix``), results not ignored.
So the comparison isolates what toolrelay adds on top of Celery, not a difference in configuration.

It talks to Redis through kombu's own transport, as any Celery does; toolrelay's worker uses its
own (``workers/redis_transport.py``), which ``TOOLRELAY_BENCH_TRANSPORT=toolrelay`` gives this worker
too, to show what that transport alone is worth. The broker, key prefix and queue come from the
other ``TOOLRELAY_BENCH_*`` variables.
"""

from __future__ import annotations

import os
import time

from celery import Celery

from receipts.settings import Settings
from workers.celery_app import celery_config
from workers.redis_transport import broker_transport

NOOP_TASK = "toolrelay.bench.noop"


def make_app(broker_url: str, key_prefix: str, queue: str, *, toolrelay_transport: bool = False) -> Celery:
    """A Celery app with toolrelay's settings on ``broker_url``, routing the no-op task to ``queue``
    (through toolrelay's Redis transport if ``toolrelay_transport``, else kombu's), its results
    kept in Redis under ``key_prefix``."""
    app = Celery("toolrelay-bench", set_as_current=False)
    config = celery_config(Settings(broker_url=broker_url, broker_key_prefix=key_prefix))
    config.pop("beat_schedule")
    app.conf.update(config, task_default_queue=queue, task_ignore_result=False, result_backend=broker_url,
                    result_backend_transport_options={"global_keyprefix": key_prefix})
    if toolrelay_transport:
        app.conf.broker_transport = broker_transport(broker_url)
    return app


app = make_app(os.environ.get("TOOLRELAY_BENCH_BROKER_URL", "redis://127.0.0.1:6379/0"),
               os.environ.get("TOOLRELAY_BENCH_KEY_PREFIX", ""), os.environ.get("TOOLRELAY_BENCH_QUEUE", "bench"),
               toolrelay_transport=os.environ.get("TOOLRELAY_BENCH_TRANSPORT") == "toolrelay")


@app.task(name=NOOP_TASK)
def noop() -> float:
    """Do nothing but say when: the result is the time it ran (epoch seconds)."""
    return time.time()
