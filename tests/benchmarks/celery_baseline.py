"""The bare Celery baseline: a no-op task on the same Redis broker and worker count as toolrelay.

Its worker is a separate ``celery worker`` process (prefork, ``-c N``) on its own key prefix and
queue; one client publishes N tasks and waits for their completion records (a Redis list the task
pushes onto), then measures the round trip of single tasks one at a time, and how fast a fresh worker
empties a queue of N tasks published while no worker ran.
"""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

import redis

from tests.benchmarks import load
from tests.benchmarks.deployment import Deployment, tree_cpu_s, wait_until
from tests.benchmarks.noop_app import NOOP_TASK, make_app
from tests.support import services
from tests.support.stack import Process

QUEUE = "bench"


class CeleryBaseline:
    """Starts the bare worker on ``deployment``'s broker and measures it."""

    def __init__(self, deployment: Deployment, workers: int, *, toolrelay_transport: bool = False) -> None:
        self.deployment = deployment
        self.workers = workers
        self.transport = "toolrelay" if toolrelay_transport else "kombu"
        self.prefix = services.redis_prefix()
        self.done_key = f"{self.prefix}done"
        self.app = make_app(services.REDIS_URL, self.prefix, QUEUE)
        self.redis = redis.Redis.from_url(services.REDIS_URL)
        self.started = 0
        self.process = self._start()

    def _start(self) -> Process:
        env = {"TOOLRELAY_BENCH_BROKER_URL": services.REDIS_URL, "TOOLRELAY_BENCH_KEY_PREFIX": self.prefix,
               "TOOLRELAY_BENCH_QUEUE": QUEUE, "TOOLRELAY_BENCH_DONE_KEY": self.done_key,
               "TOOLRELAY_BENCH_TRANSPORT": self.transport}
        self.started += 1
        process = self.deployment.spawn(f"celery-baseline-{self.started}", [
            sys.executable, "-m", "celery", "-A", "tests.benchmarks.noop_app", "worker", "-c", str(self.workers),
            "-P", "prefork", "-Q", QUEUE, "-n", f"bench-noop-{self.started}@%h", "--without-heartbeat",
            "--without-gossip", "--without-mingle", "--loglevel", "INFO"], env)
        wait_until(lambda: "ready." in process.log(), "celery baseline worker", process)
        return process

    def _send(self) -> None:
        self.app.send_task(NOOP_TASK, args=[time.time()], queue=QUEUE)

    def round_trips(self, count: int) -> list[float]:
        """Publish one task, wait for its completion record, repeat: the round trip of each."""
        self.redis.delete(self.done_key)
        elapsed = []
        for _ in range(count):
            start = time.time()
            self._send()
            if self.redis.blpop([self.done_key], timeout=30) is None:
                raise RuntimeError(f"bare Celery task not done in 30 s:\n{self.process.log()[-3000:]}")
            elapsed.append(time.time() - start)
        return elapsed

    def throughput(self, count: int) -> dict[str, Any]:
        """Publish ``count`` tasks from this one client as fast as it can, then wait for them all."""
        self.redis.delete(self.done_key)
        cpu_before = tree_cpu_s(self.process.popen.pid), time.process_time()
        first = time.time()
        for _ in range(count):
            self._send()
        published = time.time()
        stalled_at = time.monotonic() + 60
        while (done := self.redis.llen(self.done_key)) < count:
            if time.monotonic() > stalled_at:
                raise RuntimeError(f"bare Celery: {done} of {count} tasks done after 60 s")
            time.sleep(0.01)
        cpu_after = tree_cpu_s(self.process.popen.pid), time.process_time()
        records = [tuple(map(float, item.split())) for item in self.redis.lrange(self.done_key, 0, -1)]
        last = max(finished for _, finished in records)
        return {
            "tasks": count,
            "tasks_per_s": round(count / (last - first), 1),
            "publish_per_s": round(count / (published - first), 1),
            "under_load": load.ms([finished - sent for sent, finished in records]),
            "cpu_ms_per_task": {"worker": round((cpu_after[0] - cpu_before[0]) * 1000 / count, 3),
                                "publisher": round((cpu_after[1] - cpu_before[1]) * 1000 / count, 3)},
        }

    def drain(self, count: int) -> dict[str, Any]:
        """The worker alone: ``count`` tasks queued while no worker runs, then a fresh worker empties the
        queue. The rate runs from the first task done to the last, so the worker's start is left out."""
        self.process.kill(signal.SIGTERM)
        self.redis.delete(self.done_key)
        for _ in range(count):
            self._send()
        self.process = self._start()
        cpu_before = tree_cpu_s(self.process.popen.pid)
        stalled_at = time.monotonic() + 60
        while (done := self.redis.llen(self.done_key)) < count:
            if time.monotonic() > stalled_at:
                raise RuntimeError(f"bare Celery drain: {done} of {count} tasks done after 60 s")
            time.sleep(0.01)
        cpu_after = tree_cpu_s(self.process.popen.pid)
        finished = sorted(float(item.split()[1]) for item in self.redis.lrange(self.done_key, 0, -1))
        return {"tasks": count, "tasks_per_s": round((count - 1) / (finished[-1] - finished[0]), 1),
                "cpu_ms_per_task": round((cpu_after - cpu_before) * 1000 / count, 3)}

    def close(self) -> None:
        self.redis.delete(self.done_key)
        services.clear_redis_prefix(self.prefix)
        self.redis.close()
