"""One gateway process against the cheapest FastAPI app answering the same JSON (``bare_fastapi.py``).

Both run on uvicorn with uvloop and httptools (checked in /proc for ``toolrelay gateway``, whose CLI
leaves uvicorn to pick them; pinned on the command line for the bare app), one process each, and
get the same aiohttp load (keep-alive, ``--concurrency`` in flight) in the same run:

* reads: ``GET /v1/receipts/{id}`` cycling over ``--gateway-receipts`` distinct terminal receipts
  made beforehand through the API (real echo calls, run by a real worker);
* submits: ``POST /v1/tool-calls`` answered 202, with toolrelay's worker stopped so that it does
  not compete for the cores: the receipts stay pending (and their messages queued in Redis).

Each is measured A-B-B-A (toolrelay, bare, bare, toolrelay; half the requests each time), so a
drift of the machine's speed during the section falls on both sides alike.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tests.benchmarks import load
from tests.benchmarks.deployment import Deployment, answers, wait_until
from tests.benchmarks.load import Client, Request, hammer, json_body
from tests.benchmarks.processes import check_uvloop_httptools
from tests.benchmarks.run import Run
from tests.support.stack import Process, free_port


def start_bare_app(deployment: Deployment, bodies: dict[str, str]) -> tuple[Process, str]:
    """``bare_fastapi.py`` on uvicorn, uvloop + httptools pinned, answering ``bodies``."""
    path = deployment.log_dir / "bare-bodies.json"
    path.write_text(json.dumps(bodies))
    port = free_port()
    process = deployment.spawn(f"bare-fastapi-{port}", [
        sys.executable, "-m", "uvicorn", "tests.benchmarks.bare_fastapi:app", "--host", "127.0.0.1",
        "--port", str(port), "--loop", "uvloop", "--http", "httptools", "--log-level", "warning"],
        {"TOOLRELAY_BENCH_BODIES": str(path)})
    base_url = f"http://127.0.0.1:{port}"
    wait_until(answers(f"{base_url}/healthz"), "bare FastAPI app", process)
    return process, base_url


def abba(run: Run, label: str, ours: tuple[str, list[Request]], bare: tuple[str, list[Request]],
         concurrency: int) -> dict[str, Any]:
    """toolrelay, bare, bare, toolrelay, half the requests each time; rates over both halves."""
    halves: dict[str, list[dict[str, Any]]] = {"toolrelay": [], "bare": []}
    with run.phase(f"{label}: {len(ours[1])} requests each side, toolrelay-bare-bare-toolrelay"):
        for side, (base_url, requests) in (("toolrelay", ours), ("bare", bare), ("bare", bare), ("toolrelay", ours)):
            half = len(halves[side])
            chosen = requests[: len(requests) // 2] if half == 0 else requests[len(requests) // 2:]
            halves[side].append(hammer(base_url, chosen, concurrency))
    result = {side: _combined(parts) for side, parts in halves.items()}
    result["ratio"] = round(result["toolrelay"]["requests_per_s"] / result["bare"]["requests_per_s"], 3)
    return result


def _combined(parts: list[dict[str, Any]]) -> dict[str, Any]:
    seconds = sum(p["requests"] / p["requests_per_s"] for p in parts)
    requests = sum(p["requests"] for p in parts)
    unexpected: dict[str, int] = {}
    for part in parts:
        for status, count in part["unexpected"].items():
            unexpected[status] = unexpected.get(status, 0) + count
    return {"requests": requests, "requests_per_s": round(requests / seconds, 1), "halves": parts,
            "p99_ms": max(p["latency"]["p99_ms"] for p in parts), "unexpected": unexpected,
            "body_bytes": sorted({b for p in parts for b in p["body_bytes"]})}


def gateway_section(run: Run) -> dict[str, Any]:
    """Reads of terminal receipts and accepted submits: one gateway process against bare FastAPI."""
    args = run.args
    count, requests = args.gateway_receipts, args.gateway_requests
    with run.deployment("gateway") as deployment:
        with run.phase(f"gateway: start gateway + worker, {count} receipts through the API"):
            gateway, base_url = deployment.start_gateway()
            worker = deployment.start_worker(args.workers)
            client = Client(base_url, deployment.api_key)
            made = client.whole_path(count, args.concurrency)
            terminal = [c.receipt["id"] for c in made if c.receipt and c.receipt_status == "success"]
            if len(terminal) < count:
                raise RuntimeError(f"only {len(terminal)} of {count} calls succeeded")
            deployment.stop(worker)  # from here on the gateway has the cores to itself (and PostgreSQL)
            check_uvloop_httptools(gateway.popen.pid, "toolrelay gateway")
            bodies = _real_bodies(base_url, deployment.api_key, terminal[0])
            bare, bare_url = start_bare_app(deployment, bodies)
            check_uvloop_httptools(bare.popen.pid, "bare FastAPI app")
            key = deployment.api_key
        reads = [Request("GET", f"/v1/receipts/{terminal[n % len(terminal)]}", key) for n in range(requests)]
        submits = [Request("POST", "/v1/tool-calls", key, json_body({"tool": "echo", "arguments": {"i": n}}), 202)
                   for n in range(requests)]
        result: dict[str, Any] = {"receipts": count, "body_bytes": {k: len(v.encode()) for k, v in bodies.items()}}
        result["get"] = abba(run, "gateway: GET terminal receipts", (base_url, reads), (bare_url, reads),
                             args.concurrency)
        result["post"] = abba(run, "gateway: POST, worker stopped", (base_url, submits), (bare_url, submits),
                              args.concurrency)
    return result


def _real_bodies(base_url: str, api_key: str, receipt_id: str) -> dict[str, str]:
    """The bytes toolrelay answers to a GET of a terminal echo receipt and to an accepted POST."""
    async def read() -> dict[str, str]:
        async with load.session(base_url, 1, {"Authorization": f"Bearer {api_key}"}) as http:
            async with http.get(f"/v1/receipts/{receipt_id}") as response:
                terminal = await response.text()
            async with http.post("/v1/tool-calls", json={"tool": "echo", "arguments": {"i": 0}}) as response:
                accepted = await response.text()
                if response.status != 202:
                    raise RuntimeError(f"POST answered {response.status}: {accepted[:500]}")
        return {"terminal": terminal, "accepted": accepted}

    return load.run_async(read())  # type: ignore[no-any-return]
