"""The scale run: one gateway on a table of ``--scale-rows`` terminal receipts against one on a
near-empty table, the same measurements on both.

Each side has a database of its own (migrated and keyed through the CLI, one key per tenant); the
rows are written in SQL (:func:`rows.generate_receipts`: ``--scale-rows`` on the full side, just the
receipts that will be read on the near-empty one), then ANALYZEd and checkpointed. Both gateways are up at
once and no worker runs (one started and stopped on each before, to publish its tools to the
catalogue). The measurements, each A-B-B-A (near-empty, full, full, near-empty; half
the requests each time):

* GET rate: ``GET /v1/receipts/{id}`` at ``--concurrency`` of ``--scale-sample`` random existing
  receipts (a ``TABLESAMPLE`` spread over the whole table, each read once, with its tenant's key);
* GET latency: ``--scale-latency-reads`` other random receipts read one at a time, p50 and p99
  (the 5 ms target is for this);
* accept rate: ``POST /v1/tool-calls`` at ``--concurrency`` (202s, receipts stay pending);
* the storage alone: ``--scale-latency-reads`` more random receipts read one at a time in SQL by
  their id, no gateway (``SELECT * FROM receipts WHERE id = $1``), p50 and p99 on each side. What
  this costs more on the full table is PostgreSQL's and the disk's, not toolrelay's: a 6.8 GB
  table is read from the disk wherever the machine's page cache does not hold it.
"""

from __future__ import annotations

import time
from typing import Any

from tests.benchmarks import rows
from tests.benchmarks.deployment import Deployment
from tests.benchmarks.load import Request, hammer, json_body, ms
from tests.benchmarks.processes import backends_cpu_s, cpu_s, meminfo_mib
from tests.benchmarks.run import Run
from tests.support import services

TENANTS = tuple(f"scale-{n}" for n in range(5))
WARM_UP = 200  # reads before the timed ones, of receipts not read again


def _prepare(deployment: Deployment, count: int) -> dict[str, Any]:
    ids = rows.tenant_ids(deployment.database_url)
    started = time.monotonic()
    report = {"last": started}

    def progress(done: int) -> None:
        if time.monotonic() - report["last"] > 30 or done == count:
            report["last"] = time.monotonic()
            rate = done / max(time.monotonic() - started, 1e-9)
            print(f"   {done:>12,} rows  {rate:8,.0f} rows/s", flush=True)

    return rows.generate_receipts(deployment.database_url, count, [ids[t] for t in TENANTS], progress=progress)


def _reads(deployment: Deployment, count: int, total: int, seed: int) -> list[Request]:
    by_tenant = rows.tenant_ids(deployment.database_url)
    key_of = {by_tenant[name]: deployment.keys[name] for name in TENANTS}
    sample = rows.sample_receipts(deployment.database_url, count, total, seed)
    return [Request("GET", f"/v1/receipts/{rid}", key_of[tenant]) for rid, tenant in sample]


def _sql_reads(deployment: Deployment, receipt_ids: list[str]) -> dict[str, float]:
    """Each receipt read by its id in SQL, one at a time, on one connection: p50 and p99."""
    times = []
    with rows.connect(deployment.database_url) as conn:
        for receipt_id in receipt_ids:
            started = time.perf_counter()
            conn.execute("SELECT * FROM receipts WHERE id = %s", (receipt_id,)).fetchone()
            times.append(time.perf_counter() - started)
    return ms(times)


Side = tuple[str, list[Request], int, str]  # base URL, requests, the gateway's pid, its database's name


def _abba(run: Run, label: str, sides: dict[str, Side], concurrency: int) -> dict[str, Any]:
    """near-empty, full, full, near-empty; half the requests each time; rates and latency per side, and
    the CPU per request of the side's gateway and of the PostgreSQL backends serving its database."""
    parts: dict[str, list[dict[str, Any]]] = {"empty": [], "full": []}
    spent: dict[str, list[float]] = {"empty": [0.0, 0.0], "full": [0.0, 0.0]}
    with run.phase(f"scale: {label}"):
        for side in ("empty", "full", "full", "empty"):
            base_url, requests, gateway_pid, database = sides[side]
            half = requests[: len(requests) // 2] if not parts[side] else requests[len(requests) // 2:]
            before = cpu_s(gateway_pid), backends_cpu_s(database)
            parts[side].append(hammer(base_url, half, concurrency))
            spent[side][0] += cpu_s(gateway_pid) - before[0]
            spent[side][1] += backends_cpu_s(database) - before[1]
    result: dict[str, Any] = {}
    for side, done in parts.items():
        seconds = sum(p["requests"] / p["requests_per_s"] for p in done)
        requests = sum(p["requests"] for p in done)
        result[side] = {"requests": requests, "requests_per_s": round(requests / seconds, 1),
                        "p50_ms": round(sum(p["latency"]["p50_ms"] for p in done) / len(done), 2),
                        "p99_ms": max(p["latency"]["p99_ms"] for p in done),
                        "unexpected": sum(sum(p["unexpected"].values()) for p in done),
                        "gateway_cpu_ms_per_request": round(spent[side][0] / requests * 1000, 3),
                        "postgres_cpu_ms_per_request": round(spent[side][1] / requests * 1000, 3)}
    change = result["full"]["requests_per_s"] / result["empty"]["requests_per_s"] - 1
    result["rate_change_pct"] = round(change * 100, 1)
    return result


def scale_section(run: Run) -> dict[str, Any]:
    """Accept and read rates, and read latency, with ``--scale-rows`` receipts against a near-empty table."""
    args = run.args
    latency_reads, rate_reads = args.scale_latency_reads, args.scale_sample
    read = WARM_UP + rate_reads + 2 * latency_reads  # distinct receipts: none is read twice on the full side
    total = max(args.scale_rows, read)
    with run.deployment("scale-empty", tenants=TENANTS) as empty, \
            run.deployment("scale-full", tenants=TENANTS) as full:
        with run.phase(f"scale: generate {total:,} receipts in SQL, ANALYZE and CHECKPOINT"):
            generated = _prepare(full, total)
        with run.phase(f"scale: generate {read:,} receipts on the near-empty side"):
            _prepare(empty, read)
        with run.phase("scale: start one gateway on each, sample the receipts to read"):
            for deployment in (empty, full):  # a worker publishes its tools (echo) to the catalogue as it starts
                deployment.stop(deployment.start_worker(1))
            empty_gateway, empty_url = empty.start_gateway()
            full_gateway, full_url = full.start_gateway()
            urls = {"empty": empty_url, "full": full_url}
            gateways = {"empty": (empty_gateway.popen.pid, services.database_name(empty.database_url)),
                        "full": (full_gateway.popen.pid, services.database_name(full.database_url))}
            reads = {"empty": _reads(empty, read, read, seed=11), "full": _reads(full, read, total, seed=11)}
            for side, requests in reads.items():  # pools, prepared statements, the key cache
                hammer(urls[side], requests[:WARM_UP], 4)

        def part(start: int, stop: int) -> dict[str, Side]:
            return {side: (urls[side], reads[side][start:stop], *gateways[side]) for side in urls}

        result: dict[str, Any] = {"rows": total, "near_empty_rows": read, "generation": generated}
        result["get_rate"] = _abba(run, f"GET rate, {rate_reads:,} random receipts, concurrency {args.concurrency}",
                                   part(WARM_UP, WARM_UP + rate_reads), args.concurrency)
        result["get_latency"] = _abba(run, f"GET one at a time, {latency_reads:,} other random receipts",
                                      part(WARM_UP + rate_reads, WARM_UP + rate_reads + latency_reads), 1)
        with run.phase(f"scale: SQL alone, {latency_reads:,} other random receipts one at a time"):
            unread = WARM_UP + rate_reads + latency_reads
            result["sql_latency"] = {
                side: _sql_reads(deployment, [r.path.rsplit("/", 1)[1] for r in reads[side][unread:read]])
                for side, deployment in (("empty", empty), ("full", full))}
        result["page_cache_mb"] = meminfo_mib("Cached")  # what the kernel holds of files in memory
        posts = args.scale_posts
        submits: dict[str, Side] = {
            side: (urls[side], [Request("POST", "/v1/tool-calls", deployment.keys[TENANTS[0]],
                                        json_body({"tool": "echo", "arguments": {"i": n}}), 202) for n in range(posts)],
                   *gateways[side])
            for side, deployment in (("empty", empty), ("full", full))}
        result["post_rate"] = _abba(run, f"POST rate, {posts:,} submits, concurrency {args.concurrency}", submits,
                                    args.concurrency)
    return result
