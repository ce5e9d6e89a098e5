"""``python -m tests.chaos``: run the chaos script, print its figures, exit 1 if a guarantee broke.

It starts its own PostgreSQL and Redis on spare ports (it crashes them), toolrelay's processes
through the CLI, a steady load of non-idempotent writes with deadlines, and a flapping webhook
receiver; injects faults for ``--duration`` seconds, lets everything settle, and counts (see
:mod:`tests.chaos.run`). Everything it started is stopped and removed on exit, error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

from tests.chaos.figures import table
from tests.chaos.run import Clock, Options, chaos


def _pair(text: str) -> tuple[float, float]:
    low, _, high = text.partition(",")
    return float(low), float(high or low)


def parse_args(argv: list[str] | None) -> tuple[Options, argparse.Namespace]:
    defaults = Options()
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--duration", type=float, default=defaults.duration_s, help="seconds of load under faults")
    parser.add_argument("--rate", type=float, default=defaults.rate, help="calls per second")
    parser.add_argument("--workers", type=int, default=defaults.tool_workers, help="tools workers (processes)")
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency, help="pool processes per tools worker")
    parser.add_argument("--gateway-workers", type=int, default=defaults.gateway_workers, help="gateway processes")
    parser.add_argument("--fault-every", type=float, default=defaults.fault_every_s, help="seconds between faults")
    parser.add_argument("--down", type=_pair, default=defaults.down_s, metavar="MIN,MAX",
                        help="how long Redis and PostgreSQL stay down in an outage (seconds)")
    parser.add_argument("--long-down", type=float, default=defaults.long_down_s,
                        help="seconds PostgreSQL stays down in its long outage (past a request's 10 s wait)")
    parser.add_argument("--deadlines", default=",".join(f"{d:g}" for d in defaults.deadlines_s),
                        help="the calls' timeout_s, picked at random")
    parser.add_argument("--work", type=_pair, default=defaults.work_s, metavar="MIN,MAX",
                        help="seconds each write works before it records its effect")
    parser.add_argument("--poll-share", type=float, default=defaults.poll_share,
                        help="share of calls the client long-polls to their end")
    parser.add_argument("--settle", type=float, default=defaults.settle_s, help="longest settle period (seconds)")
    parser.add_argument("--slack", type=float, default=defaults.slack_s,
                        help="seconds past its deadline a call may end before it counts as stuck")
    parser.add_argument("--probes", type=int, default=defaults.probes, help="calls made after the settle period")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="seed of every random choice")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                        help="a TOOLRELAY_ setting of every process, e.g. lease_grace_s=5 (repeatable)")
    parser.add_argument("--json", metavar="FILE", help="write the figures and details as JSON to FILE")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs (kept anyway on failure)")
    args = parser.parse_args(argv)
    settings = {}
    for item in args.setting:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--setting {item!r}: expected NAME=VALUE")
        settings[name.strip().lower().removeprefix("toolrelay_")] = value
    options = Options(duration_s=args.duration, rate=args.rate, tool_workers=args.workers,
                      concurrency=args.concurrency, gateway_workers=args.gateway_workers,
                      fault_every_s=args.fault_every, down_s=args.down, long_down_s=args.long_down,
                      deadlines_s=tuple(float(d) for d in args.deadlines.split(",")), work_s=args.work,
                      poll_share=args.poll_share, settle_s=args.settle, slack_s=args.slack, probes=args.probes,
                      seed=args.seed, settings=settings, keep_logs=args.keep_logs)
    return options, args


def _terminate(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    options, args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    clock = Clock()
    try:
        report = asyncio.run(chaos(options, clock))
    except KeyboardInterrupt:
        print("\ninterrupted: cleaned up", file=sys.stderr)
        return 130
    document = report.document
    print()
    print(table(report.figures))
    print()
    for name in ("calls", "faults", "receiver_modes", "kills", "postgres", "answers", "probes"):
        print(f"{name}: {json.dumps(document[name], default=str)}")
    if document["samples"]:
        print("samples of unexpected answers:")
        for sample in document["samples"]:
            print(f"  {sample}")
    if args.json:
        Path(args.json).write_text(json.dumps(document, indent=2, default=str) + "\n")
        print(f"JSON written to {args.json}")
    print("OK: every figure that must be 0 is 0" if report.ok else f"FAILED: {', '.join(document['failed'])}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
