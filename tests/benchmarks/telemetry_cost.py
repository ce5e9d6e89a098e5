"""Gateway CPU per request, read from ``/proc/<pid>/stat`` (utime + stime), for telemetry's cost.

Each round starts one ``toolrelay gateway`` process from a source tree (``--source``: this tree, or
an export of an earlier commit to compare with), warms it up, then sends ``--requests`` accepted
submits (``POST /v1/tool-calls``, no worker running: the receipts stay pending) and as many reads of
a terminal receipt (``GET /v1/receipts/{id}``), and reports the CPU the gateway process spent per
request of each kind. Rounds alternate the sources (A B B A ...) so a drift of the machine falls on
both. ``--traced`` adds rounds of this tree with tracing exported to a local OTLP collector.

    python -m tests.benchmarks.telemetry_cost --source before=/tmp/before --source after=. --requests 3000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from receipts import tenants
from receipts.catalogue import tools as catalogue
from receipts.db import Database
from receipts.store import calls
from receipts.store.calls import Result
from receipts.tenants import create_key
from tests.benchmarks.load import Request, hammer, json_body
from tests.support import services
from tests.support.collector import collecting
from tests.support.factories import call
from tests.support.stack import Process, free_port, wait_serving
from workers.registry import load_registry

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of the whole line)


def measure(source: Path, env: dict[str, str], key: str, read_id: str, requests: int, log_dir: Path,
            name: str) -> dict[str, float]:
    port = free_port()
    process = Process(name, [sys.executable, "-m", "toolrelay", "gateway", "--port", str(port)],
                      {**env, "PYTHONPATH": str(source)}, log_dir, cwd=source)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_serving(process, base_url)
        submit = Request("POST", "/v1/tool-calls", key, json_body({"tool": "async_add", "arguments": {"a": 1, "b": 2}}),
                         expect=202)
        read = Request("GET", f"/v1/receipts/{read_id}", key)
        hammer(base_url, [submit] * 300 + [read] * 300, 16)  # warm up: caches, pools, code paths
        figures: dict[str, float] = {}
        for label, request in (("submit", submit), ("read", read)):
            before = cpu_ticks(process.popen.pid)
            result = hammer(base_url, [request] * requests, 16)
            spent = cpu_ticks(process.popen.pid) - before
            assert not result["unexpected"], result
            figures[f"{label}_cpu_ms"] = round(spent / TICKS * 1000 / requests, 4)
            figures[f"{label}_per_s"] = result["requests_per_s"]
        return figures
    finally:
        process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", action="append", default=[], help="LABEL=DIR of a source tree (repeatable)")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2, help="A B B A pairs")
    parser.add_argument("--traced", action="store_true", help="also this tree with tracing on")
    args = parser.parse_args()
    sources = [(label, Path(path).resolve()) for label, path in (s.split("=", 1) for s in args.source)] or [
        ("this", Path(".").resolve())]
    database_url = services.create_database()
    prefix = services.redis_prefix()
    log_dir = Path(f"/tmp/telemetry-cost-{os.getpid()}")
    log_dir.mkdir(parents=True, exist_ok=True)
    db = Database(database_url, pool_size=2, name="toolrelay-bench")
    env = {**os.environ, "TOOLRELAY_DATABASE_URL": database_url, "TOOLRELAY_BROKER_URL": services.REDIS_URL,
           "TOOLRELAY_BROKER_KEY_PREFIX": prefix, "TOOLRELAY_LOG_LEVEL": "WARNING"}
    for name in [n for n in env if n.startswith("OTEL_")]:
        del env[name]
    results: dict[str, list[dict[str, float]]] = {}
    try:
        key = db.run(create_key("bench"))
        db.run(catalogue.publish(load_registry(["tests.support.tools"]).specs()))
        found = db.run(tenants.for_key(key))
        assert found is not None
        receipt, _ = db.run(calls.create(call(tenant_id=found.id)))
        db.run(calls.claim(receipt.id, lease_s=30, actor="bench"))
        db.run(calls.finish(receipt.id, 1, Result("success", output={"sum": 3}), actor="bench"))
        plan: list[tuple[str, Path, dict[str, str]]] = []
        for _ in range(args.rounds):
            order = sources + sources[::-1]
            plan += [(label, path, env) for label, path in order]
        with collecting() as collector:
            traced_env = {**env, "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint}
            if args.traced:
                plan += [("traced", sources[-1][1], traced_env)] * args.rounds
            for index, (label, path, round_env) in enumerate(plan):
                figures = measure(path, round_env, key, receipt.id, args.requests, log_dir, f"gw-{index}-{label}")
                print(label, figures, flush=True)
                results.setdefault(label, []).append(figures)
                time.sleep(0.5)
    finally:
        db.dispose()
        services.clear_redis_prefix(prefix)
        services.drop_database(database_url)
    summary = {label: {k: round(sum(r[k] for r in rows) / len(rows), 4) for k in rows[0]}
               for label, rows in results.items()}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
