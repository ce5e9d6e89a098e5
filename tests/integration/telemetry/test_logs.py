"""JSON logs of a real gateway and worker: one object a line, with the fields the work in hand knows."""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg

from tests.integration.telemetry.conftest import api_tool, define, submit
from tests.support.stack import Process, Stack
from tests.support.upstreams import Reply, Upstream


def json_lines(process: Process) -> list[dict[str, Any]]:
    """Every line ``process`` wrote to standard error, each parsed as one JSON object (or the test fails)."""
    lines = [line for line in process.stderr().splitlines() if line.strip()]
    assert lines, f"{process.name} logged nothing"
    parsed = []
    for line in lines:
        record = json.loads(line)  # raises on any line that is not JSON
        assert isinstance(record, dict), line
        assert {"time", "level", "logger", "message"} <= record.keys(), line
        parsed.append(record)
    return parsed


def logged(process: Process, match: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        for record in json_lines(process):
            if all(record.get(key) == value for key, value in match.items()):
                return record
        assert time.monotonic() < deadline, f"{process.name} logged no line with {match}"
        time.sleep(0.1)


def tenant_id(stack: Stack, name: str = "tests") -> str:
    with psycopg.connect(stack.database_url) as conn:
        row = conn.execute("SELECT id FROM tenants WHERE name = %s", (name,)).fetchone()
    assert row is not None
    return str(row[0])


def process(stack: Stack, name: str) -> Process:
    return next(p for p in stack.processes if p.name == name)


def test_the_worker_logs_one_json_line_when_a_call_ends(stack: Stack, upstream: Upstream) -> None:
    upstream.route("/logged", Reply(json={"ok": True}))
    with stack.client() as client:
        define(client, api_tool(upstream, "logged_get", "/logged"))
        receipt = stack.wait_terminal(submit(client, "logged_get", trace_id="trace_logs_1")["id"])
    assert receipt["status"] == "success", receipt
    worker = process(stack, "worker1")
    line = logged(worker, {"receipt_id": receipt["id"], "status": "success"})
    assert line["level"] == "INFO" and line["logger"] == "toolrelay.calls"
    assert line["tool"] == "logged_get" and line["trace_id"] == "trace_logs_1" and line["attempt"] == 1
    assert line["tenant"] == tenant_id(stack)
    assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
    assert len(line["otel_trace_id"]) == 32  # the line joins the call's trace
    ends = [r for r in json_lines(worker) if r.get("receipt_id") == receipt["id"] and r.get("status")]
    assert len(ends) == 1  # one line per call, when it ends
    ready = [r for r in json_lines(worker) if r["message"].endswith("ready.")]
    assert ready and ready[0]["logger"].startswith("celery")  # Celery's own lines are JSON too


def test_a_retried_call_logs_its_retry_and_then_its_one_end(stack: Stack, upstream: Upstream) -> None:
    upstream.route("/retried", Reply(500, json={"no": 1}), Reply(json={"ok": True}))
    with stack.client() as client:
        define(client, api_tool(upstream, "retried_get", "/retried"))
        receipt = stack.wait_terminal(submit(client, "retried_get")["id"])
    assert receipt["status"] == "success" and receipt["attempt"] == 2, receipt
    worker = process(stack, "worker1")
    retry = logged(worker, {"receipt_id": receipt["id"], "error_code": "upstream_error", "attempt": 1})
    assert retry["tool"] == "retried_get" and retry["retry_in_s"] > 0
    end = logged(worker, {"receipt_id": receipt["id"], "status": "success"})
    assert end["attempt"] == 2


def test_the_gateway_logs_json_with_the_tenant_of_the_request(stack: Stack) -> None:
    with stack.client() as client:
        created = client.post("/v1/tools", json={"kind": "function", "name": "logged_fn", "description": "x",
                                                 "parameters": {"type": "object"}})
        assert created.status_code == 201, created.text
        waiting = submit(client, "logged_fn")
        canceled = client.post(f"/v1/receipts/{waiting['id']}/cancel")
        assert canceled.status_code == 200, canceled.text
    gateway = process(stack, "gateway")
    line = logged(gateway, {"receipt_id": waiting["id"], "status": "canceled"})
    assert line["tool"] == "logged_fn" and line["tenant"] == tenant_id(stack)
    assert any(r["logger"] == "receipts.telemetry.tracing" for r in json_lines(gateway))  # "tracing on", as JSON
