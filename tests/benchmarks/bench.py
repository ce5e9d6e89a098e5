"""toolrelay's benchmark: the path a user takes, against bare Celery and bare FastAPI, on this machine.

Run ``.venv/bin/python -m tests.benchmarks.bench --help``. Every section starts its own processes on
a fresh database and Redis key prefix, drives toolrelay only through its CLI and HTTP API, and
removes all of it again (each section is a function ``(Run) -> dict`` in :data:`SECTIONS`):

* ``headline``: ``toolrelay gateway`` + ``worker -c N`` + ``beat``; a client submits echo calls and
  long-polls every receipt to its end, against bare Celery whose clients ``get()`` every result,
  in paired rounds; one call at a time; CPU per call; resident memory;
* ``gateway``: one gateway process against the cheapest FastAPI app answering the same JSON;
* ``workers``: queue drains by the worker alone, and bare Celery on both Redis transports;
* ``round_trips``: SQL and Redis round trips per call, through counting proxies (not timed);
* ``webhooks``: webhook deliveries by the worker's dispatcher against a bare aiohttp client;
* ``dev``: ``toolrelay dev`` on the whole path against the same bare Celery;
* ``scale``: one gateway on ``--scale-rows`` receipts against one on a near-empty table;
* ``agents``: a batch of 8 calls against single submits, and the run loop's own time per iteration.

Everything started is stopped, and every database dropped, on exit, error or Ctrl-C.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.benchmarks import profiles
from tests.benchmarks.agents import agents_section
from tests.benchmarks.dev_mode import dev_section
from tests.benchmarks.drains import workers_section
from tests.benchmarks.gateway_rates import gateway_section
from tests.benchmarks.headline import headline_section
from tests.benchmarks.postgres import use_own_postgres
from tests.benchmarks.report import table
from tests.benchmarks.roundtrips import round_trips_section
from tests.benchmarks.run import Run
from tests.benchmarks.scale import scale_section
from tests.benchmarks.webhooks import webhooks_section

SECTIONS: dict[str, Callable[[Run], dict[str, Any]]] = {
    "headline": headline_section,
    "gateway": gateway_section,
    "workers": workers_section,
    "round_trips": round_trips_section,
    "webhooks": webhooks_section,
    "dev": dev_section,
    "scale": scale_section,
    "agents": agents_section,
}


def selected(args: argparse.Namespace) -> list[str]:
    """The sections to run, in :data:`SECTIONS` order: ``--only``'s, less those a zero count skips."""
    names = list(SECTIONS) if args.only is None else [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(SECTIONS))
    if unknown:
        raise SystemExit(f"unknown section(s): {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    skipped = {"round_trips": args.round_trips == 0, "webhooks": args.webhooks == 0, "scale": args.scale_rows == 0,
               "dev": args.dev_rounds == 0 and args.low_load_calls == 0, "agents": args.agent_runs == 0}
    return [name for name in SECTIONS if name in names and not skipped.get(name, False)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench", description=doc.split("\n")[0])
    parser.add_argument("--only", metavar="A,B", help=f"sections to run (default all): {','.join(SECTIONS)}")
    parser.add_argument("--calls", type=int, default=2000, help="calls (and bare tasks) per timed run")
    parser.add_argument("--concurrency", type=int, default=32, help="calls or requests in flight, both sides")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (celery -c), both sides")
    parser.add_argument("--rounds", type=int, default=5, help="headline: paired rounds, order flipped each round")
    parser.add_argument("--stock-rounds", type=int, default=3,
                        help="headline: paired rounds on kombu's own Redis path (0: skip)")
    parser.add_argument("--low-load-calls", type=int, default=200, help="calls one at a time, each side (0: skip)")
    parser.add_argument("--gateway-receipts", type=int, default=2000, help="gateway: distinct terminal receipts read")
    parser.add_argument("--gateway-requests", type=int, default=20000, help="gateway: GETs and POSTs, each side")
    parser.add_argument("--scale-rows", type=int, default=10_000_000, help="scale: receipts generated (0: skip)")
    parser.add_argument("--scale-sample", type=int, default=20000, help="scale: random receipts read at concurrency")
    parser.add_argument("--scale-latency-reads", type=int, default=2000, help="scale: reads one at a time")
    parser.add_argument("--scale-posts", type=int, default=10000, help="scale: POSTs, each side")
    parser.add_argument("--dev-rounds", type=int, default=3, help="dev: paired rounds")
    parser.add_argument("--agent-batches", type=int, default=200, help="agents: batches of 8 one at a time")
    parser.add_argument("--agent-runs", type=int, default=50, help="agents: runs one at a time (0: skip)")
    parser.add_argument("--webhooks", type=int, default=2000, help="webhook messages to deliver (0: skip)")
    parser.add_argument("--round-trips", type=int, default=50, help="calls through counting proxies (0: skip)")
    parser.add_argument("--postgres", choices=("own", "machine"), default="own",
                        help="own: a server of the benchmark's own (autovacuum on, shared_buffers as below), "
                             "from the binaries toolrelay dev uses; machine: the server of TOOLRELAY_TEST_PG")
    parser.add_argument("--shared-buffers", default="quarter", metavar="SIZE",
                        help="own server's shared_buffers: 'quarter' (of the machine's memory, PostgreSQL's advice "
                             "for a database server), 'stock' (initdb's 128MB), or a size such as 2GB")
    parser.add_argument("--log-level", default="INFO", help="TOOLRELAY_LOG_LEVEL of gateway and worker")
    parser.add_argument("--profile", metavar="DIR", help="headline: one more run under py-spy; profiles in DIR")
    parser.add_argument("--json", metavar="FILE", help="write every figure as JSON to FILE")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs (kept anyway on failure)")
    args = parser.parse_args(argv)
    if args.profile and not profiles.PY_SPY.exists():
        parser.error(f"--profile needs py-spy ({profiles.PY_SPY}): .venv/bin/pip install py-spy")
    return args


def _terminate(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = selected(args)
    signal.signal(signal.SIGTERM, _terminate)
    log_dir = Path(tempfile.mkdtemp(prefix="toolrelay-bench-"))
    print(f"toolrelay benchmark: {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"sections {', '.join(names)}; logs in {log_dir}", flush=True)
    run = Run(args, log_dir)
    ok = False
    try:
        if args.postgres == "own":
            run.results["postgres"] = use_own_postgres(run)
            print(f"PostgreSQL: {run.results['postgres']['summary']}", flush=True)
        for name in names:
            run.results[name] = SECTIONS[name](run)
        ok = True
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr)
    finally:
        for cleanup in reversed(run.cleanups):
            try:
                cleanup()
            except Exception as exc:  # noqa: BLE001 - clean up the rest regardless
                print(f"cleanup: {exc}", file=sys.stderr)
        if ok and not args.keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)
        elif not ok:
            print(f"logs kept in {log_dir}", file=sys.stderr)
    if not ok:
        return 1
    print()
    print(table(run.results))
    if args.json:
        document = {"options": vars(args), "cores": os.cpu_count(), "phases": run.phases, **run.results}
        Path(args.json).write_text(json.dumps(document, indent=2, default=str) + "\n")
        print(f"\nJSON written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
