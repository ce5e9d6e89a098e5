"""What toolrelay costs an agent: a batch of 8 calls in one request, and one turn of a run's loop.

* **batches**: ``POST /v1/batches`` with 8 echo calls (OpenAI Chat format, ``wait_s`` 30): the round
  trip one batch at a time (accepted, all 8 run by the worker, messages back), and the gateway's
  CPU per batch at ``--concurrency`` in flight, against its CPU per single ``POST /v1/tool-calls``
  (both accept-only, ``wait_s`` 0, the worker stopped so only the gateway's own work is counted),
  after a warm-up of each, in paired rounds whose order flips: the median round of each side, and
  the median of the rounds' ratios (each round's batches against the singles sent next to them, the
  figure least moved by a machine whose speed drifts from one second to the next).
  The target: one batch of 8 costs less gateway CPU than 2 single submits.
* **loop**: runs against a scripted Chat Completions server on this machine that answers at once
  (each turn calls echo once, the last answers): toolrelay's own time per iteration (a model call
  and a tool call), from the run's creation to its end divided by its iterations, one run at a
  time. It shows the loop costs milliseconds, not the model's seconds.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import httpx

from tests.benchmarks.deployment import Deployment
from tests.benchmarks.load import Request, hammer, json_body, ms
from tests.benchmarks.processes import cpu_s
from tests.benchmarks.run import Run
from tests.support.model_server import call, model_server, say

CALLS_PER_BATCH = 8
TURNS_PER_RUN = 5


def chat_message(batch: int) -> dict[str, Any]:
    return {"role": "assistant", "tool_calls": [
        {"id": f"call_{batch}_{n}", "type": "function", "function": {"name": "echo", "arguments": json.dumps({"n": n})}}
        for n in range(CALLS_PER_BATCH)]}


ACCEPT_ROUNDS = 8  # after a warm-up round of each; the order flips every round


def _cpu_per_request(gateway_pid: int, base_url: str, requests: list[Request], concurrency: int) -> dict[str, Any]:
    before = cpu_s(gateway_pid)
    result = hammer(base_url, requests, concurrency)
    result["gateway_cpu_ms_per_request"] = round((cpu_s(gateway_pid) - before) / len(requests) * 1000, 3)
    return result


def _accept_cpu(gateway_pid: int, base_url: str, key: str, count: int, concurrency: int) -> dict[str, Any]:
    """The gateway's CPU per batch of 8 and per single submit, accept only, in paired rounds of ``count``
    batches and ``2 * count`` single submits (each round's requests new ones: none is a replay)."""
    made = 0

    def batch_requests() -> list[Request]:
        nonlocal made
        made += count
        return [Request("POST", "/v1/batches", key, json_body(
            {"format": "openai_chat", "message": chat_message(10_000 + made + n), "wait_s": 0}), 202)
            for n in range(count)]

    def singles() -> list[Request]:
        return [Request("POST", "/v1/tool-calls", key, json_body({"tool": "echo", "arguments": {"i": n}}), 202)
                for n in range(2 * count)]

    hammer(base_url, batch_requests(), concurrency)  # warm-up: connections, pools, prepared statements
    hammer(base_url, singles(), concurrency)
    rounds: dict[str, list[dict[str, Any]]] = {"batch": [], "single": []}
    for n in range(ACCEPT_ROUNDS):
        for side in (("batch", "single") if n % 2 == 0 else ("single", "batch")):
            made_requests = batch_requests() if side == "batch" else singles()
            rounds[side].append(_cpu_per_request(gateway_pid, base_url, made_requests, concurrency))
    result: dict[str, Any] = {"rounds": ACCEPT_ROUNDS, "paired_ratio": round(statistics.median(
        batch["gateway_cpu_ms_per_request"] / (2 * single["gateway_cpu_ms_per_request"])
        for batch, single in zip(rounds["batch"], rounds["single"], strict=True)), 3)}
    for side, parts in rounds.items():
        result[f"{side}_accept"] = {
            "requests": sum(part["requests"] for part in parts),
            "unexpected": {status: sum(part["unexpected"].get(status, 0) for part in parts)
                           for status in {status for part in parts for status in part["unexpected"]}},
            "rounds_cpu_ms_per_request": [part["gateway_cpu_ms_per_request"] for part in parts],
            "gateway_cpu_ms_per_request": round(statistics.median(
                part["gateway_cpu_ms_per_request"] for part in parts), 3)}
    return result


def batches(run: Run, deployment: Deployment) -> dict[str, Any]:
    args = run.args
    gateway, base_url = deployment.start_gateway()
    worker = deployment.start_worker(args.workers)
    key = deployment.api_key
    headers = {"Authorization": f"Bearer {key}"}
    result: dict[str, Any] = {"calls_per_batch": CALLS_PER_BATCH}
    with run.phase(f"agents: {args.agent_batches} batches of {CALLS_PER_BATCH}, one at a time"), \
            httpx.Client(base_url=base_url, headers=headers, timeout=70) as client:
        times, wrong = [], 0
        for n in range(args.agent_batches):
            started = time.perf_counter()
            answer = client.post("/v1/batches", json={"format": "openai_chat", "message": chat_message(n)})
            times.append(time.perf_counter() - started)
            body = answer.json()
            messages = body.get("messages") or []
            wrong += (answer.status_code != 200 or len(messages) != CALLS_PER_BATCH
                      or any(m["content"].startswith("error:") for m in messages))  # each echo call ran
        result["round_trip"] = ms(times)
        result["not_completed"] = wrong
    deployment.stop(worker)  # accept-only from here: the gateway's own work
    count = args.agent_batches * 4
    with run.phase(f"agents: gateway CPU, {ACCEPT_ROUNDS} paired rounds of {count} batches and {2 * count} "
                   "single submits, accept only"):
        result.update(_accept_cpu(gateway.popen.pid, base_url, key, count, args.concurrency))
    deployment.stop_processes()
    return result


def loop(run: Run, deployment: Deployment) -> dict[str, Any]:
    args = run.args
    with model_server() as models:
        _gateway, base_url = deployment.start_gateway({"TOOLRELAY_OUTBOUND_ALLOW_CIDRS": "127.0.0.0/8"})
        deployment.start_worker(args.workers, {"TOOLRELAY_OUTBOUND_ALLOW_CIDRS": "127.0.0.0/8"})
        headers = {"Authorization": f"Bearer {deployment.api_key}"}
        per_iteration, failed = [], 0
        with run.phase(f"agents: {args.agent_runs} runs of {TURNS_PER_RUN} model turns, one at a time"), \
                httpx.Client(base_url=base_url, headers=headers, timeout=70) as client:
            defined = client.put("/v1/models/bench", json={"base_url": models.url, "model": "instant"})
            if defined.status_code != 200:
                raise RuntimeError(f"PUT /v1/models answered {defined.status_code}: {defined.text}")
            for r in range(args.agent_runs):
                turns = [call((f"c{r}_{t}", "echo", {"turn": t})) for t in range(TURNS_PER_RUN - 1)]
                models.script("instant", *turns, say("done"))
                started = time.perf_counter()
                body = client.post("/v1/runs", json={"model": "bench", "input": "go", "tools": ["echo"],
                                                     "wait_s": 30}).json()
                give_up = started + 60  # a run that has not ended by then counts as not success
                while body.get("status") not in ("success", "failed", "canceled") and time.perf_counter() < give_up:
                    body = client.get(f"/v1/runs/{body['id']}", params={"wait_s": 10}).json()
                elapsed = time.perf_counter() - started
                if body["status"] != "success" or body["iterations"] != TURNS_PER_RUN:
                    failed += 1
                    continue
                per_iteration.append(elapsed / TURNS_PER_RUN)
        deployment.stop_processes()
    return {"runs": args.agent_runs, "turns_per_run": TURNS_PER_RUN, "per_iteration": ms(per_iteration),
            "failed": failed}


def agents_section(run: Run) -> dict[str, Any]:
    """Batches of 8 against single submits, and the run loop's own time per iteration."""
    with run.deployment("agent-batches") as deployment:
        result = {"batches": batches(run, deployment)}
    with run.deployment("agent-loop") as deployment:
        result["loop"] = loop(run, deployment)
    return result
