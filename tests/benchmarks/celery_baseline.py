"""The bare Celery baseline: a no-op task on the same Redis and the same worker count as toolrelay.

Its worker is a separate ``celery worker -P prefork -c N`` on its own key prefix and queue; its
clients (:mod:`celery_clients`) publish each task and fetch its result with ``AsyncResult.get()``
before the next. :meth:`CeleryBaseline.drain` times a fresh worker emptying a queue filled while
no worker ran.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

from tests.benchmarks import load
from tests.benchmarks.celery_clients import ClientPool, Timing
from tests.benchmarks.deployment import Deployment, wait_until
from tests.benchmarks.noop_app import NOOP_TASK, make_app
from tests.benchmarks.processes import tree_cpu_s
from tests.support import services
from tests.support.stack import Process

QUEUE = "bench"


class CeleryBaseline:
    """The bare worker on ``deployment``'s Redis (own prefix) and ``clients`` client processes."""

    def __init__(self, deployment: Deployment, workers: int, clients: int) -> None:
        self.deployment = deployment
        self.workers = workers
        self.prefix = services.redis_prefix()
        self.started = 0
        self.pool: ClientPool | None = None
        try:
            self.process = self.start()
            self.pool = ClientPool(clients, services.REDIS_URL, self.prefix, QUEUE)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> CeleryBaseline:
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    @property
    def clients(self) -> ClientPool:
        assert self.pool is not None
        return self.pool

    def start(self, *, toolrelay_transport: bool = False) -> Process:
        """Start a bare worker (kombu's Redis transport unless ``toolrelay_transport``)."""
        env = {"TOOLRELAY_BENCH_BROKER_URL": services.REDIS_URL, "TOOLRELAY_BENCH_KEY_PREFIX": self.prefix,
               "TOOLRELAY_BENCH_QUEUE": QUEUE,
               "TOOLRELAY_BENCH_TRANSPORT": "toolrelay" if toolrelay_transport else "kombu"}
        self.started += 1
        process = self.deployment.spawn(f"celery-baseline-{self.started}", [
            sys.executable, "-m", "celery", "-A", "tests.benchmarks.noop_app", "worker", "-c", str(self.workers),
            "-P", "prefork", "-Q", QUEUE, "-n", f"bench-noop-{self.started}@%h", "--without-heartbeat",
            "--without-gossip", "--without-mingle", "--loglevel", "INFO"], env)
        wait_until(lambda: "ready." in process.log(), "celery baseline worker", process)
        return process

    def restart(self, *, toolrelay_transport: bool = False) -> None:
        self.deployment.stop(self.process)
        self.process = self.start(toolrelay_transport=toolrelay_transport)

    def whole_path(self, tasks: int, clients: int | None = None) -> dict[str, Any]:
        """``tasks`` tasks, each published and its result fetched by one of ``clients`` clients."""
        cpu_before = tree_cpu_s(self.process.popen.pid), self.clients.cpu_s()
        timings = self.clients.run(tasks, clients)
        cpu_after = tree_cpu_s(self.process.popen.pid), self.clients.cpu_s()
        return {**summarize(timings),
                "cpu_ms_per_task": {"worker": round((cpu_after[0] - cpu_before[0]) * 1000 / tasks, 3),
                                    "clients": round((cpu_after[1] - cpu_before[1]) * 1000 / tasks, 3)}}

    def round_trips(self, tasks: int) -> dict[str, Any]:
        """One client, one task at a time: publish, ``get()``, repeat."""
        return summarize(self.clients.run(tasks, 1))

    def drain(self, tasks: int) -> dict[str, Any]:
        """The worker alone: ``tasks`` queued while no worker runs, then a fresh worker empties the
        queue. The rate runs from the first task run to the last, so the worker's start is left out."""
        self.deployment.stop(self.process)
        app = make_app(services.REDIS_URL, self.prefix, QUEUE)
        try:
            results = [app.send_task(NOOP_TASK, queue=QUEUE) for _ in range(tasks)]
            self.process = self.start()
            cpu_before = tree_cpu_s(self.process.popen.pid)
            ran = sorted(float(result.get(timeout=120)) for result in results)
            cpu_after = tree_cpu_s(self.process.popen.pid)
        finally:
            app.close()
        return {"tasks": tasks, "tasks_per_s": round((tasks - 1) / (ran[-1] - ran[0]), 1),
                "cpu_ms_per_task": round((cpu_after - cpu_before) * 1000 / tasks, 3)}

    def close(self) -> None:
        """Stop the clients and the worker, delete the baseline's Redis keys."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if getattr(self, "process", None) is not None:
            self.deployment.stop(self.process)
        services.clear_redis_prefix(self.prefix)


def summarize(timings: list[Timing]) -> dict[str, Any]:
    """Rate from the first publish to the last result read, and the client's round trips."""
    span = max(t[2] for t in timings) - min(t[0] for t in timings)
    ok = [t for t in timings if t[3]]
    return {"tasks": len(timings), "tasks_per_s": round(len(timings) / span, 1) if span > 0 else float("nan"),
            "round_trip": load.ms([t[2] - t[0] for t in ok]), "failed": len(timings) - len(ok)}
