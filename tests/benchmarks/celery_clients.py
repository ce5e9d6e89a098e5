"""Bare Celery's clients: processes that each publish a no-op task, wait for its result with
``AsyncResult.get()``, and only then publish the next, as toolrelay's client waits for each receipt.

Why processes, not threads: Celery's Redis result backend reads every result of a process through
one pub/sub connection, and ``AsyncResult.get()`` from several threads at once reads that socket
concurrently (replies get lost or mixed: celery/celery#6335, #5145). asyncio does not help: ``get()``
blocks, and a way around it (reading the result keys directly, say) would not be ``AsyncResult.get()``
any more. So each of the N concurrent clients is a single-threaded process with its own app, broker connection
and result subscription, the supported way to use it. They fork from a forkserver that imported
Celery once, so 32 of them start in a second and share most of their memory; they ignore SIGINT,
so Ctrl-C reaches only the benchmark, which stops them.

The clients share one counter of tasks left to send, as the aiohttp client's lanes share one list
of calls, so ``clients`` tasks are in flight until the counter runs out.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

from tests.benchmarks.processes import tree_cpu_s

PRELOAD = ["celery", "kombu.transport.redis", "celery.backends.redis", "redis", "tests.benchmarks.noop_app"]


def _preload() -> list[str]:
    """What the forkserver imports once for every client: Celery, and the benchmark's modules that the
    module run as ``__main__`` imported. multiprocessing runs that module's top level again in each
    child; with its imports already done, that costs next to nothing instead of a second and a half
    of CPU per client."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    main = spec.name if spec is not None else "__main__"
    return PRELOAD + sorted(name for name in sys.modules if name.startswith("tests.benchmarks.") and name != main)


Timing = tuple[float, float, float, bool]  # sent, task ran, result read, result is a float


def _client(conn: Connection, left: Any, broker_url: str, key_prefix: str, queue: str) -> None:
    """One client process: wait for a command, run it, send back what it measured."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from tests.benchmarks.noop_app import NOOP_TASK, make_app

    app = make_app(broker_url, key_prefix, queue)
    conn.send("ready")
    while True:
        command = conn.recv()
        if command == "stop":
            break
        timings: list[Timing] = []
        while True:
            with left.get_lock():
                if left.value <= 0:
                    break
                left.value -= 1
            sent = time.time()
            try:
                ran = app.send_task(NOOP_TASK, queue=queue).get(timeout=60)
                timings.append((sent, float(ran), time.time(), True))
            except Exception:  # noqa: BLE001 - a lost or failed task is counted, not fatal
                timings.append((sent, float("nan"), time.time(), False))
        conn.send(timings)
    app.close()


class ClientPool:
    """``size`` bare Celery client processes on one broker, key prefix and queue."""

    def __init__(self, size: int, broker_url: str, key_prefix: str, queue: str) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(_preload())
        self.left = context.Value("q", 0)
        self.pipes: list[Connection] = []
        self.processes: list[Any] = []
        for number in range(size):
            parent, child = context.Pipe()
            process = context.Process(target=_client, name=f"bare-client-{number}", daemon=True,
                                      args=(child, self.left, broker_url, key_prefix, queue))
            process.start()
            child.close()
            self.pipes.append(parent)
            self.processes.append(process)
        for pipe, process in zip(self.pipes, self.processes, strict=True):
            if not pipe.poll(120) or pipe.recv() != "ready":
                self.close()
                raise RuntimeError(f"bare Celery client {process.name} did not start (exit code {process.exitcode})")

    def run(self, tasks: int, clients: int | None = None) -> list[Timing]:
        """``tasks`` tasks over the first ``clients`` clients (all by default), each one at a time."""
        lanes = self.pipes[:clients or len(self.pipes)]
        with self.left.get_lock():
            self.left.value = tasks
        for pipe in lanes:
            pipe.send("run")
        timings: list[Timing] = []
        for pipe in lanes:
            if not pipe.poll(600):
                raise RuntimeError("a bare Celery client did not finish in 10 minutes")
            timings.extend(pipe.recv())
        return timings

    def cpu_s(self) -> float:
        """CPU seconds the clients have used so far."""
        return sum(tree_cpu_s(p.pid) for p in self.processes if p.pid is not None)

    def close(self) -> None:
        """Stop every client (terminate those that do not stop within 10 s)."""
        for pipe in self.pipes:
            with contextlib.suppress(BrokenPipeError, OSError):  # a client that died already
                pipe.send("stop")
        deadline = time.monotonic() + 10
        for process in self.processes:
            process.join(max(0.1, deadline - time.monotonic()))
            if process.is_alive():
                process.terminate()
                process.join(5)
        for pipe in self.pipes:
            pipe.close()
        self.pipes, self.processes = [], []
