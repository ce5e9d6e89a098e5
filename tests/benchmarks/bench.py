"""toolrelay's benchmark: the receipt pipeline against bare Celery, on this machine's PostgreSQL and Redis.

Run ``.venv/bin/python -m tests.benchmarks.bench --help``. It creates a fresh database and Redis key
prefix, starts ``toolrelay gateway`` and ``toolrelay worker -c N`` (no beat unless ``--beat``), and
measures, section by section (each a function ``(Run) -> dict`` in :data:`SECTIONS`):

* ``pipeline``: latency one call at a time, then N echo calls over HTTP at concurrency C (aiohttp);
* ``celery``: a bare Celery no-op task, same broker, same Celery settings, same worker count (and once
  more on toolrelay's Redis transport, to show what that alone is worth);
* ``paired``: both up at once, their throughput runs alternated, the median of the per-round ratios;
* ``webhooks``: webhook deliveries by the worker's dispatcher against a bare aiohttp client;
* ``round_trips``: SQL and Redis round trips per call, through counting proxies (not timed).

A new section is one more function in :data:`SECTIONS` plus its lines in :func:`table`. Everything
started is stopped, and the database dropped, on exit, error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.benchmarks import load, profiles, webhooks
from tests.benchmarks.celery_baseline import CeleryBaseline
from tests.benchmarks.deployment import Deployment
from tests.benchmarks.pipeline import Pipeline
from tests.benchmarks.roundtrips import CountingProxy
from tests.support import services


@dataclass
class Run:
    """One benchmark run: its options, its deployment, the load seen per phase, and the results."""

    args: argparse.Namespace
    deployment: Deployment
    log_dir: Path
    results: dict[str, Any] = field(default_factory=dict)
    phases: list[dict[str, Any]] = field(default_factory=list)
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Print and keep the load average at the start and end of a phase, and how long it took."""
        start_load, started = os.getloadavg(), time.monotonic()
        print(f"-- {name:<34} load {_load(start_load)}", flush=True)
        yield
        end_load = os.getloadavg()
        elapsed = time.monotonic() - started
        print(f"   {name + ' done':<34} load {_load(end_load)}   {elapsed:6.1f} s", flush=True)
        self.phases.append({"phase": name, "load_start": [round(x, 2) for x in start_load],
                            "load_end": [round(x, 2) for x in end_load], "seconds": round(elapsed, 1)})


def _load(values: tuple[float, float, float]) -> str:
    return " ".join(f"{v:5.2f}" for v in values)


# -- sections -----------------------------------------------------------------------------------

def pipeline_section(run: Run) -> dict[str, Any]:
    """toolrelay end to end: gateway + worker processes, N echo calls over HTTP."""
    args, deployment = run.args, run.deployment
    with run.phase(f"start gateway + worker -c {args.workers}"):
        gateway, base_url = deployment.start_gateway()
        worker = deployment.start_worker(args.workers)
        if args.beat:
            deployment.start_beat()
        pipeline = Pipeline(deployment, base_url, gateway.popen.pid, worker.popen.pid)
    with run.phase("warm-up (50 calls)"):
        pipeline.warm_up()
    result: dict[str, Any] = {"beat": args.beat}
    if args.low_load_calls:
        with run.phase(f"low load: {args.low_load_calls} calls, one at a time"):
            result["low_load"] = pipeline.low_load(args.low_load_calls)
    with run.phase(f"throughput: {args.calls} calls at concurrency {args.concurrency}"):
        result["throughput"] = pipeline.throughput(args.calls, args.concurrency)
    if args.profile:
        out = Path(args.profile)
        out.mkdir(parents=True, exist_ok=True)
        with run.phase(f"profiled run: {args.calls} calls (py-spy)"):
            recorders = [profiles.Recorder("gateway", gateway.popen.pid, out),
                         profiles.Recorder("worker", worker.popen.pid, out, subprocesses=True)]
            run.cleanups.append(lambda: [r.stop() for r in recorders])
            try:
                result["profiled_throughput"] = pipeline.throughput(args.calls, args.concurrency)
            finally:
                for recorder in recorders:
                    recorder.stop()
        summary = "".join(profiles.summarize(r.path) for r in recorders if r.path.exists())
        (out / "summary.txt").write_text(summary)
        result["profiles"] = str(out)
    with run.phase(f"worker alone: {args.calls} queued calls"):
        worker.kill(signal.SIGTERM)

        def fresh_worker() -> int:
            return deployment.start_worker(args.workers).popen.pid

        result["drain"] = pipeline.drain(args.calls, args.concurrency, fresh_worker)
    with run.phase("stop gateway + worker"):
        deployment.stop_processes()
    return result


def celery_section(run: Run) -> dict[str, Any]:
    """Bare Celery: a no-op task on the same Redis, prefork with the same worker count."""
    args = run.args
    with run.phase(f"bare Celery: start worker -c {args.workers}"):
        baseline = CeleryBaseline(run.deployment, args.workers)
        run.cleanups.append(baseline.close)
        baseline.throughput(200)  # warm-up
    result: dict[str, Any] = {}
    if args.low_load_calls:
        with run.phase(f"bare Celery: {args.low_load_calls} round trips"):
            result["round_trip"] = load.ms(baseline.round_trips(args.low_load_calls))
    with run.phase(f"bare Celery: {args.calls} tasks"):
        result["throughput"] = baseline.throughput(args.calls)
    with run.phase(f"bare Celery worker alone: {args.calls} queued tasks"):
        result["drain"] = baseline.drain(args.calls)
    with run.phase("bare Celery: stop worker"):
        run.deployment.stop_processes()
    with run.phase(f"bare Celery on toolrelay's Redis transport: {args.calls} tasks"):
        # What toolrelay's transport alone is worth; the ratios above are to kombu's, as any Celery runs.
        alike = CeleryBaseline(run.deployment, args.workers, toolrelay_transport=True)
        run.cleanups.append(alike.close)
        alike.throughput(200)  # warm-up
        result["toolrelay_transport"] = alike.throughput(args.calls)
        run.deployment.stop_processes()
    return result


def paired_section(run: Run) -> dict[str, Any]:
    """toolrelay and bare Celery both up, their throughput runs alternated ``--rounds`` times.

    On a shared machine the speed drifts between phases a minute apart, and a single pair of runs
    can move the ratio by a tenth either way. Alternating the two and taking the median of the
    per-round ratios keeps each pair close in time. The order flips every round (toolrelay first in
    odd rounds, bare Celery first in even ones), so what one side's run leaves behind (PostgreSQL's
    autovacuum and checkpoints after toolrelay's writes, say) does not always fall on the same side.
    """
    args, deployment = run.args, run.deployment
    with run.phase(f"paired: start gateway + worker -c {args.workers} and the bare worker"):
        gateway, base_url = deployment.start_gateway()
        worker = deployment.start_worker(args.workers)
        pipeline = Pipeline(deployment, base_url, gateway.popen.pid, worker.popen.pid)
        pipeline.submitted = _count_receipts(deployment)  # the earlier sections' receipts, all settled
        baseline = CeleryBaseline(deployment, args.workers)
        run.cleanups.append(baseline.close)
        pipeline.warm_up()
        baseline.throughput(200)
    rounds = []
    for number in range(1, args.rounds + 1):
        ours_first = number % 2 == 1
        with run.phase(f"paired round {number}: {args.calls} calls and {args.calls} bare tasks, "
                       f"{'toolrelay' if ours_first else 'bare Celery'} first"):
            if ours_first:
                ours = pipeline.throughput(args.calls, args.concurrency)
            bare = baseline.throughput(args.calls)
            if not ours_first:
                ours = pipeline.throughput(args.calls, args.concurrency)
        rounds.append({"calls_per_s": ours["calls_per_s"], "tasks_per_s": bare["tasks_per_s"],
                       "ratio": round(ours["calls_per_s"] / bare["tasks_per_s"], 3),
                       "failures": ours["rejected"] + ours["not_success"]})
    with run.phase("paired: stop"):
        deployment.stop_processes()
    ratios = sorted(r["ratio"] for r in rounds)
    return {"rounds": rounds, "median_ratio": ratios[len(ratios) // 2]}


def webhooks_section(run: Run) -> dict[str, Any]:
    """The dispatcher (in ``toolrelay worker``) delivering queued messages, against bare aiohttp posts."""
    args, deployment = run.args, run.deployment
    count = args.webhooks
    with run.phase("webhooks: start gateway + worker + receiver"):
        receiver = webhooks.Receiver(deployment)
        _, base_url = deployment.start_gateway()
        deployment.start_worker(args.workers)
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {deployment.api_key}"},
                          timeout=30) as client:
            created = client.post("/v1/webhook-endpoints", json={"url": receiver.url,
                                                                 "event_types": [webhooks.EVENT]})
            if created.status_code != 201:
                raise RuntimeError(f"could not register the endpoint: {created.status_code} {created.text}")
            endpoint = created.json()
            receiver.use_secret(endpoint["secret"])
            receipt = client.post("/v1/tool-calls", json={"tool": "echo", "arguments": {"hook": 1},
                                                          "wait_s": 10}).json()
        tenant_id = _tenant_of(deployment, endpoint["id"])
        payload = {"type": webhooks.EVENT, "timestamp": receipt["finished_at"], "data": receipt}
        publisher = webhooks.sender(services.REDIS_URL, deployment.prefix)
        deliveries = webhooks.Deliveries(deployment.db, publisher, tenant_id=tenant_id, endpoint_id=endpoint["id"],
                                         payload=payload)
        deadline = time.monotonic() + 30
        while receiver.stats()["requests"] < 1:  # the call's own receipt.succeeded, through the nudge
            if time.monotonic() > deadline:
                raise RuntimeError("the echo call's webhook never arrived")
            time.sleep(0.05)
        deliveries.run(min(count, 200))  # warm-up
    result: dict[str, Any] = {}
    with run.phase(f"webhooks: {count} deliveries by the dispatcher"):
        result["dispatcher"] = deliveries.run(count)
    with run.phase(f"webhooks: {count} posts by bare aiohttp"):
        result["bare_aiohttp"] = webhooks.bare_aiohttp(receiver.url, payload, count, args.concurrency)
    result["ratio"] = round(result["dispatcher"]["deliveries_per_s"] / result["bare_aiohttp"]["posts_per_s"], 3)
    stats = receiver.stats()
    result["signatures"] = {"verified": stats["verified"], "bad": stats["bad_signatures"]}
    with run.phase("webhooks: stop gateway + worker"):
        deployment.stop_processes()
    return result


def _tenant_of(deployment: Deployment, endpoint_id: str) -> str:
    from sqlalchemy import select

    from receipts.tables import webhook_endpoints

    with deployment.db.engine.connect() as conn:
        return str(conn.execute(select(webhook_endpoints.c.tenant_id)
                                .where(webhook_endpoints.c.id == endpoint_id)).scalar_one())


def round_trips_section(run: Run) -> dict[str, Any]:
    """SQL statements and Redis commands per call, gateway and worker apart (a run of its own, untimed)."""
    calls, deployment = run.args.round_trips, run.deployment
    with run.phase(f"round trips: {calls} calls through counting proxies"):
        proxies = {f"{role}_{kind}": CountingProxy(kind, port).start()
                   for role in ("gateway", "worker") for kind, port in (("postgres", 5432), ("redis", 6379))}
        run.cleanups.append(lambda: [p.stop() for p in proxies.values()])

        def env(role: str) -> dict[str, str]:
            return {"TOOLRELAY_DATABASE_URL": deployment.database_url.replace(
                        "127.0.0.1:5432", f"127.0.0.1:{proxies[role + '_postgres'].port}"),
                    "TOOLRELAY_BROKER_URL": services.REDIS_URL.replace(
                        "127.0.0.1:6379", f"127.0.0.1:{proxies[role + '_redis'].port}")}

        gateway, base_url = deployment.start_gateway(env("gateway"))
        worker = deployment.start_worker(run.args.workers, env("worker"))
        pipeline = Pipeline(deployment, base_url, gateway.popen.pid, worker.popen.pid)
        pipeline.submitted = _count_receipts(deployment)
        for _ in range(20):  # warm-up: pools, caches, prepared statements
            pipeline.warm_up(1)
        started = time.monotonic()
        for proxy in proxies.values():
            proxy.tally.reset()
        for _ in range(calls):
            pipeline.warm_up(1)  # one POST, then wait (on our own connection) until it is terminal
        seconds = time.monotonic() - started
        result: dict[str, Any] = {"calls": calls, "seconds": round(seconds, 1)}
        for name, proxy in proxies.items():
            result[name] = {
                "round_trips_per_call": round(proxy.tally.round_trips / calls, 2),
                "per_call": {label: round(n / calls, 2) for label, n in proxy.tally.labels.most_common()},
            }
        deployment.stop_processes()
        for proxy in proxies.values():
            proxy.stop()
    return result


def _count_receipts(deployment: Deployment) -> int:
    from sqlalchemy import func, select

    from receipts.tables import receipts

    with deployment.db.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(receipts)).scalar_one())


SECTIONS: dict[str, Callable[[Run], dict[str, Any]]] = {
    "pipeline": pipeline_section,
    "celery": celery_section,
    "paired": paired_section,
    "webhooks": webhooks_section,
    "round_trips": round_trips_section,
}


def selected(args: argparse.Namespace) -> list[str]:
    names = ["pipeline"]
    if not args.skip_celery:
        names.append("celery")
        if args.rounds:
            names.append("paired")
    if args.round_trips:
        names.append("round_trips")  # before webhooks: its endpoint would add deliveries to every call
    if args.webhooks:
        names.append("webhooks")
    return names


# -- output --------------------------------------------------------------------------------------

def _pair(figures: dict[str, float] | None) -> str:
    if not figures:
        return "-"
    return f"{figures['p50_ms']:.1f} / {figures['p99_ms']:.1f}"


def table(results: dict[str, Any]) -> str:
    """The figures that matter, one per line, with the issue's targets beside them."""
    pipe = results.get("pipeline", {})
    tput = pipe.get("throughput", {})
    low = pipe.get("low_load", {})
    bare = results.get("celery", {})
    rows: list[tuple[str, str, str]] = [
        ("toolrelay end to end (calls/s)", f"{tput.get('calls_per_s', '-')}", ""),
    ]
    if bare:
        ratio = tput["calls_per_s"] / bare["throughput"]["tasks_per_s"]
        rows += [("bare Celery end to end (tasks/s)", f"{bare['throughput']['tasks_per_s']}", ""),
                 ("ratio toolrelay / bare Celery", f"{ratio:.2f}x", ">= 0.5x")]
    rows += [
        ("submit rate, HTTP 202s (calls/s)", f"{tput.get('submit_per_s', '-')}", ""),
        ("low load submit->success p50/p99 ms", _pair(low.get("submit_to_success")), "p50 < 15"),
        ("low load POST wait_s round trip p50/p99", _pair(low.get("client_round_trip")), ""),
        ("under load submit->success p50/p99 ms", _pair(tput.get("submit_to_success")), ""),
        ("under load created->finished p50/p99 ms", _pair(tput.get("created_to_finished")), ""),
        ("under load POST answer p50/p99 ms", _pair(tput.get("submit_response")), ""),
    ]
    if bare:
        rows += [("bare Celery round trip p50/p99 ms (low)", _pair(bare.get("round_trip")), ""),
                 ("bare Celery under load p50/p99 ms", _pair(bare["throughput"]["under_load"]), ""),
                 ("bare Celery publish rate (tasks/s)", f"{bare['throughput']['publish_per_s']}", ""),
                 ("bare Celery CPU ms/task worker / client",
                  " / ".join(f"{v:.2f}" for v in bare["throughput"]["cpu_ms_per_task"].values()), "")]
        alike = bare.get("toolrelay_transport")
        if alike:
            rows.append(("bare Celery on toolrelay's Redis transport (tasks/s)", f"{alike['tasks_per_s']}", ""))
    paired = results.get("paired")
    if paired:
        rows += [("paired rounds: toolrelay calls/s",
                  " ".join(f"{r['calls_per_s']:.0f}" for r in paired["rounds"]), ""),
                 ("paired rounds: bare Celery tasks/s",
                  " ".join(f"{r['tasks_per_s']:.0f}" for r in paired["rounds"]), ""),
                 ("paired rounds: ratios", " ".join(f"{r['ratio']:.2f}" for r in paired["rounds"]), ""),
                 ("paired rounds: median ratio", f"{paired['median_ratio']:.2f}x", ">= 0.5x")]
    drain, bare_drain = pipe.get("drain"), bare.get("drain")
    if drain:
        rows.append(("worker alone, queue drain (calls/s)", f"{drain['calls_per_s']}", ""))
    if drain and bare_drain:
        rows += [("bare Celery worker alone, queue drain (tasks/s)", f"{bare_drain['tasks_per_s']}", ""),
                 ("ratio of the drains", f"{drain['calls_per_s'] / bare_drain['tasks_per_s']:.2f}x", ""),
                 ("worker CPU ms/call, drain: toolrelay / bare",
                  f"{drain['worker_cpu_ms_per_call']:.2f} / {bare_drain['cpu_ms_per_task']:.2f}", "")]
    cpu = tput.get("cpu_ms_per_call", {})
    if cpu:
        rows.append(("CPU ms/call gw / worker / pg / client",
                     " / ".join(f"{cpu.get(k, 0):.2f}" for k in ("gateway", "worker", "postgres", "load_generator")),
                     ""))
    failures = sum(part.get(key, 0) for part in (tput, low, drain or {}) for key in ("rejected", "not_success"))
    failures += sum(r["failures"] for r in (paired or {}).get("rounds", []))
    rows.append(("rejected or not success", str(failures), "0"))
    hooks = results.get("webhooks", {})
    if hooks:
        signatures = hooks["signatures"]
        rows += [("webhook deliveries/s (dispatcher)", f"{hooks['dispatcher']['deliveries_per_s']}", ""),
                 ("bare aiohttp posts/s, same bodies", f"{hooks['bare_aiohttp']['posts_per_s']}", ""),
                 ("ratio dispatcher / bare aiohttp", f"{hooks['ratio']:.2f}x", ">= 0.15x"),
                 ("attempts logged / signatures ok / bad",
                  f"{hooks['dispatcher']['attempts_logged']} / {signatures['verified']} / {signatures['bad']}", "")]
    trips = results.get("round_trips", {})
    for role in ("gateway", "worker"):
        if trips:
            rows.append((f"round trips/call {role}: SQL / Redis",
                         f"{trips[f'{role}_postgres']['round_trips_per_call']} / "
                         f"{trips[f'{role}_redis']['round_trips_per_call']}", ""))
    width = max(len(r[0]) for r in rows)
    lines = [f"{'figure':<{width}}  {'value':>22}  target", "-" * (width + 34)]
    lines += [f"{name:<{width}}  {value:>22}  {target}" for name, value, target in rows]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls (and bare tasks) in the throughput run")
    parser.add_argument("--concurrency", type=int, default=32, help="HTTP requests in flight")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (celery -c), both sides")
    parser.add_argument("--low-load-calls", type=int, default=200, help="calls one at a time (0: skip)")
    parser.add_argument("--skip-celery", action="store_true", help="do not measure the bare Celery baseline")
    parser.add_argument("--rounds", type=int, default=5,
                        help="paired rounds of toolrelay and bare Celery, in alternating order (0: skip)")
    parser.add_argument("--webhooks", type=int, default=2000, help="webhook messages to deliver (0: skip)")
    parser.add_argument("--round-trips", type=int, default=50, help="calls through counting proxies (0: skip)")
    parser.add_argument("--beat", action="store_true", help="also run beat (the sweeper) during the run")
    parser.add_argument("--log-level", default="INFO", help="TOOLRELAY_LOG_LEVEL of gateway and worker")
    parser.add_argument("--profile", metavar="DIR", help="add a run under py-spy; profiles and summary in DIR")
    parser.add_argument("--json", metavar="FILE", help="write every figure as JSON to FILE")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs (kept anyway on failure)")
    return parser.parse_args(argv)


def _terminate(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    log_dir = Path(tempfile.mkdtemp(prefix="toolrelay-bench-"))
    print(f"toolrelay benchmark: {os.cpu_count()} cores, Python {platform.python_version()}, logs in {log_dir}")
    deployment: Deployment | None = None
    run: Run | None = None
    ok = False
    try:
        deployment = Deployment(log_dir, log_level=args.log_level)
        run = Run(args, deployment, log_dir)
        for name in selected(args):
            run.results[name] = SECTIONS[name](run)
        ok = True
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr)
    finally:
        for cleanup in reversed(run.cleanups if run else []):
            try:
                cleanup()
            except Exception as exc:  # noqa: BLE001 - clean up the rest regardless
                print(f"cleanup: {exc}", file=sys.stderr)
        if deployment is not None:
            if not ok:
                for process in deployment.processes:
                    print(f"===== {process.name} =====\n{process.log()[-3000:]}", file=sys.stderr)
            deployment.close()
        if ok and not args.keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)
    if run is None or not ok:
        return 1
    print()
    print(table(run.results))
    if args.json:
        document = {"options": vars(args), "cores": os.cpu_count(), "phases": run.phases, **run.results}
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
        print(f"\nJSON written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
