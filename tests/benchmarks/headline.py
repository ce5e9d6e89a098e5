"""The headline: the user's whole path through a production-shaped toolrelay, against bare Celery
whose client fetches every result.

toolrelay: ``toolrelay gateway`` (one process), ``toolrelay worker -c N`` and ``toolrelay beat``, on
its own database and key prefix. Its client (aiohttp, ``--concurrency`` in flight) POSTs each echo
call and long-polls its receipt (``GET /v1/receipts/{id}?wait_s=30``, again while not terminal).
Bare Celery: ``celery worker -P prefork -c N`` with a no-op task and toolrelay's Celery settings,
its results in Redis, and ``--concurrency`` client processes that publish and ``get()`` each task.
Both are up at once for :func:`paired.paired_rounds`; before them, the low-load latencies (one call
at a time), after them the resident memory of every toolrelay process. Last (``--stock-rounds``),
the same paired rounds with kombu's own Redis path (``TOOLRELAY_REDIS_FAST_PATH=false``: the
gateway publishing through kombu, the worker on kombu's Redis transport), to show what toolrelay's
own publisher and transport are worth on the whole path.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from tests.benchmarks import profiles
from tests.benchmarks.celery_baseline import CeleryBaseline
from tests.benchmarks.deployment import Deployment
from tests.benchmarks.load import Client, summarize
from tests.benchmarks.paired import CpuMeter, median_of, paired_rounds
from tests.benchmarks.processes import check_uvloop_httptools, rss_mb, tree_pids
from tests.benchmarks.run import Run
from tests.support.stack import Process


def headline_section(run: Run) -> dict[str, Any]:
    """Gateway + worker + beat against bare Celery + result backend, paired rounds of the whole path."""
    args = run.args
    with run.deployment("headline") as deployment:
        with run.phase(f"headline: start gateway, worker -c {args.workers}, beat, and bare Celery "
                       f"(-c {args.workers}, {args.concurrency} clients)"):
            gateway, base_url = deployment.start_gateway()
            worker = deployment.start_worker(args.workers)
            beat = deployment.start_beat()
            check_uvloop_httptools(gateway.popen.pid, "toolrelay gateway")
            client = Client(base_url, deployment.api_key)
            baseline = CeleryBaseline(deployment, args.workers, args.concurrency)
        with baseline:
            with run.phase("headline: warm-up, 200 calls and 400 bare tasks"):
                client.whole_path(200, args.concurrency)
                baseline.whole_path(400)
            result: dict[str, Any] = {"beat": True}
            if args.low_load_calls:
                with run.phase(f"headline: low load, {args.low_load_calls} calls one at a time, each side"):
                    result["low_load"] = summarize(client.whole_path(args.low_load_calls, 1))
                    result["low_load_post_wait"] = client.post_wait(args.low_load_calls)
                    result["bare_low_load"] = baseline.round_trips(args.low_load_calls)
            meter = CpuMeter({"gateway": gateway.popen.pid, "worker": worker.popen.pid, "beat": beat.popen.pid},
                             deployment.database_url)

            def ours() -> dict[str, Any]:
                before = meter.read()
                calls = client.whole_path(args.calls, args.concurrency)
                return {**summarize(calls), "cpu_ms_per_call": CpuMeter.per_call(before, meter.read(), len(calls))}

            paired = paired_rounds(run, "headline", ours, lambda: baseline.whole_path(args.calls), args.rounds)
            result["paired"] = paired
            result["under_load"] = _medians(paired["rounds"])
            result["memory_mb"] = memory(gateway, worker, beat, baseline.process)
            if args.profile:
                result["profile"] = _profiled(run, client, gateway, worker)
            if args.stock_rounds:
                result["stock"] = _stock(run, deployment, baseline, [gateway, worker])
    return result


def _stock(run: Run, deployment: Deployment, baseline: CeleryBaseline, running: list[Process]) -> dict[str, Any]:
    """Paired rounds again, toolrelay's gateway and worker restarted on kombu's own Redis path."""
    args = run.args
    with run.phase("headline: restart gateway and worker with TOOLRELAY_REDIS_FAST_PATH=false (kombu's Redis path)"):
        for process in running:
            process.kill(signal.SIGTERM)
            process.popen.wait(60)
        stock = {"TOOLRELAY_REDIS_FAST_PATH": "false"}
        _, base_url = deployment.start_gateway(stock)
        deployment.start_worker(args.workers, stock)
        client = Client(base_url, deployment.api_key)
        client.whole_path(200, args.concurrency)
    paired = paired_rounds(run, "headline, kombu's Redis path",
                           lambda: summarize(client.whole_path(args.calls, args.concurrency)),
                           lambda: baseline.whole_path(args.calls), args.stock_rounds)
    return {"paired": paired}


def _medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-round figures, as the median over the rounds."""
    if not rounds:
        return {}
    cpu_roles = rounds[0]["ours"]["cpu_ms_per_call"].keys()
    return {
        "submit_to_terminal": {q: median_of(rounds, "ours", "submit_to_terminal", q) for q in ("p50_ms", "p99_ms")},
        "post_answer": {q: median_of(rounds, "ours", "post_answer", q) for q in ("p50_ms", "p99_ms")},
        "gets_per_call": median_of(rounds, "ours", "gets_per_call"),
        "bare_round_trip": {q: median_of(rounds, "bare", "round_trip", q) for q in ("p50_ms", "p99_ms")},
        "cpu_ms_per_call": {role: median_of(rounds, "ours", "cpu_ms_per_call", role) for role in cpu_roles},
        "bare_cpu_ms_per_task": {role: median_of(rounds, "bare", "cpu_ms_per_task", role)
                                 for role in ("worker", "clients")},
        "failures": sum(r["ours"]["rejected"] + r["ours"]["not_success"] + r["bare"]["failed"] for r in rounds),
    }


def memory(gateway: Process, worker: Process, beat: Process, bare_worker: Process) -> dict[str, Any]:
    """Resident memory (MiB) of each toolrelay process, and of the bare worker for comparison; fails if
    any of them exited meanwhile (beat included: the figures are of a deployment with beat running)."""
    for process in (gateway, worker, beat, bare_worker):
        if process.popen.poll() is not None:
            raise RuntimeError(f"{process.name} exited during the run:\n{process.log()[-3000:]}")
    workers, bare = tree_pids(worker.popen.pid), tree_pids(bare_worker.popen.pid)
    return {"gateway": rss_mb(gateway.popen.pid),
            "worker_main": rss_mb(workers[0]) if workers else float("nan"),
            "worker_children": [rss_mb(pid) for pid in workers[1:]],
            "beat": rss_mb(beat.popen.pid),
            "bare_worker_main": rss_mb(bare[0]) if bare else float("nan"),
            "bare_worker_children": [rss_mb(pid) for pid in bare[1:]]}


def _profiled(run: Run, client: Client, gateway: Process, worker: Process) -> dict[str, Any]:
    """One more toolrelay run under py-spy: collapsed stacks and a summary in ``--profile DIR``."""
    out = Path(run.args.profile)
    out.mkdir(parents=True, exist_ok=True)
    with run.phase(f"headline: profiled run, {run.args.calls} calls (py-spy)"):
        recorders = [profiles.Recorder("gateway", gateway.popen.pid, out),
                     profiles.Recorder("worker", worker.popen.pid, out, subprocesses=True)]
        def stop_recorders() -> None:
            for recorder in recorders:
                recorder.stop()

        run.cleanups.append(stop_recorders)
        try:
            figures = summarize(client.whole_path(run.args.calls, run.args.concurrency))
        finally:
            stop_recorders()
    (out / "summary.txt").write_text("".join(profiles.summarize(r.path) for r in recorders if r.path.exists()))
    return {"dir": str(out), "calls_per_s": figures["calls_per_s"]}
