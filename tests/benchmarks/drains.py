"""The worker side on its own: queue drains, and what toolrelay's Redis transport alone is worth.

* Drain: ``--calls`` calls are accepted over HTTP while no worker runs, then a fresh
  ``toolrelay worker -c N`` empties the queue; the rate runs from the first receipt finished to the
  last (``finished_at``, read in SQL), so the worker's start is left out and no HTTP work shares the
  cores. Its CPU per call runs from the moment the worker says it is ready, so the first calls of
  fresh pool children (imports, connections, prepared statements) are in it: small at 2,000 calls.
  The same for bare Celery: tasks published while no worker runs, emptied by a fresh worker, timed
  by the tasks' own clocks.
* Transport: the bare worker once on kombu's Redis transport, as any Celery runs, and once on
  toolrelay's (``workers/redis_transport.py``: one redis-py client per channel where kombu builds one
  per acknowledgement, the unacked bookkeeping sent without waiting for its reply), each on the
  headline's bare path (every result fetched), kombu-toolrelay-toolrelay-kombu with half the tasks
  each time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.benchmarks import rows
from tests.benchmarks.celery_baseline import CeleryBaseline
from tests.benchmarks.load import Client
from tests.benchmarks.processes import tree_cpu_s
from tests.benchmarks.run import Run
from tests.support.stack import Process


def _drain(client: Client, database_url: str, start_worker: Callable[[], Process], calls: int, concurrency: int,
           stall_s: float = 60) -> dict[str, Any]:
    accepted = client.submit(calls, concurrency)
    worker = start_worker()
    cpu_before = tree_cpu_s(worker.popen.pid)
    last_open, changed = -1, time.monotonic()
    while (still_open := rows.open_receipts(database_url)) > 0:
        if still_open != last_open:
            last_open, changed = still_open, time.monotonic()
        elif time.monotonic() - changed > stall_s:
            raise RuntimeError(f"drain: {still_open} receipts still open; none settled for {stall_s:.0f} s")
        time.sleep(0.25)  # each count reads PostgreSQL: not too often, it is part of what is measured
    cpu_after = tree_cpu_s(worker.popen.pid)
    settled = rows.finished_at(database_url, accepted)
    finished = sorted(t for _, t in settled.values())
    return {"calls": calls, "accepted": len(accepted),
            "calls_per_s": round((len(finished) - 1) / (finished[-1] - finished[0]), 1),
            "worker_cpu_ms_per_call": round((cpu_after - cpu_before) * 1000 / calls, 3),
            "not_success": sum(1 for status, _ in settled.values() if status != "success")}


def workers_section(run: Run) -> dict[str, Any]:
    """toolrelay's worker and bare Celery's emptying a queue; bare Celery on both Redis transports."""
    args = run.args
    result: dict[str, Any] = {}
    with run.deployment("workers") as deployment:
        with run.phase(f"workers: toolrelay drain, {args.calls} calls queued with no worker"):
            _, base_url = deployment.start_gateway()
            worker = deployment.start_worker(args.workers)
            client = Client(base_url, deployment.api_key)
            client.whole_path(100, args.concurrency)  # warm-up: the gateway's pools, the catalogue
            deployment.stop(worker)
            result["drain"] = _drain(client, deployment.database_url,
                                     lambda: deployment.start_worker(args.workers), args.calls, args.concurrency)
            deployment.stop_processes()
        with run.phase(f"workers: start bare Celery (-c {args.workers}, {args.concurrency} clients), 400 tasks"):
            baseline = CeleryBaseline(deployment, args.workers, args.concurrency)
        with baseline:
            baseline.whole_path(400)  # warm-up
            with run.phase(f"workers: bare Celery drain, {args.calls} tasks queued with no worker"):
                result["bare_drain"] = baseline.drain(args.calls)
            halves: dict[str, list[dict[str, Any]]] = {"kombu": [], "toolrelay": []}
            with run.phase(f"workers: bare Celery on each Redis transport, {args.calls} tasks each"):
                for transport in ("kombu", "toolrelay", "toolrelay", "kombu"):
                    baseline.restart(toolrelay_transport=transport == "toolrelay")
                    baseline.whole_path(100)  # the fresh worker's first tasks
                    halves[transport].append(baseline.whole_path(args.calls // 2))
            result["transport"] = {name: round(sum(p["tasks"] for p in parts) /
                                               sum(p["tasks"] / p["tasks_per_s"] for p in parts), 1)
                                   for name, parts in halves.items()}
    return result
