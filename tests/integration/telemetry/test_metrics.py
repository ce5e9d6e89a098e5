"""The figures move when calls run: the worker's /metrics (its processes summed) and the gateway's."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from receipts.tenants import create_key
from tests.integration.telemetry.conftest import api_tool, define, submit
from tests.support.receiver import Receiver
from tests.support.stack import Stack, free_port, wait_serving
from tests.support.upstreams import Reply, Upstream


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = httpx.get(url, timeout=10)
    assert response.status_code == 200, response.text
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def value(figures: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return figures.get((name, frozenset(labels.items())), 0.0)


def eventually(url: str, name: str, expected: float, **labels: str) -> dict[tuple[str, frozenset[tuple[str, str]]],
                                                                          float]:
    """The figures once ``name{labels}`` reads ``expected`` (a child process records a moment after its
    transition commits)."""
    deadline = time.monotonic() + 30
    while True:
        figures = scrape(url)
        if value(figures, name, **labels) == expected or time.monotonic() > deadline:
            assert value(figures, name, **labels) == expected, (name, labels, value(figures, name, **labels))
            return figures
        time.sleep(0.1)


def test_the_worker_counts_calls_their_latencies_and_retries(stack: Stack, upstream: Upstream,
                                                             worker_metrics_url: str) -> None:
    upstream.route("/counted", Reply(json={"ok": True}))
    upstream.route("/recounted", Reply(503, json={"busy": True}), Reply(json={"ok": True}))
    upstream.route("/refused", Reply(404, json={"no": True}))
    with stack.client() as client:
        define(client, api_tool(upstream, "counted_get", "/counted"))
        define(client, api_tool(upstream, "recounted_get", "/recounted"))
        define(client, api_tool(upstream, "refused_get", "/refused"))
        for _ in range(3):
            assert stack.wait_terminal(submit(client, "counted_get")["id"])["status"] == "success"
        assert stack.wait_terminal(submit(client, "recounted_get")["id"])["status"] == "success"
        assert stack.wait_terminal(submit(client, "refused_get")["id"])["status"] == "failed"
    figures = eventually(worker_metrics_url, "toolrelay_tool_calls_finished_total", 3, tool="counted_get",
                         status="success")
    assert value(figures, "toolrelay_tool_call_duration_seconds_count", tool="counted_get") == 3
    assert value(figures, "toolrelay_tool_call_start_delay_seconds_count", tool="counted_get") == 3
    assert value(figures, "toolrelay_tool_call_run_seconds_count", tool="counted_get") == 3
    assert value(figures, "toolrelay_tool_call_run_seconds_sum", tool="counted_get") > 0
    assert value(figures, "toolrelay_tool_call_duration_seconds_bucket", tool="counted_get", le="+Inf") == 3
    figures = eventually(worker_metrics_url, "toolrelay_tool_calls_finished_total", 1, tool="recounted_get",
                         status="success")
    assert value(figures, "toolrelay_tool_call_retries_total", tool="recounted_get") == 1
    assert value(figures, "toolrelay_tool_call_run_seconds_count", tool="recounted_get") == 2  # both attempts
    assert value(figures, "toolrelay_tool_call_start_delay_seconds_count", tool="recounted_get") == 2
    figures = eventually(worker_metrics_url, "toolrelay_tool_calls_finished_total", 1, tool="refused_get",
                         status="failed")
    assert value(figures, "toolrelay_tool_call_retries_total", tool="refused_get") == 0
    for action in ("republished", "reclaimed", "lost", "expired", "batches_completed"):  # the series exist
        assert ("toolrelay_sweeper_actions_total", frozenset({("action", action)})) in figures


def test_the_worker_counts_webhook_outcomes_and_latency(stack: Stack, upstream: Upstream,
                                                       worker_metrics_url: str) -> None:
    upstream.route("/announced", Reply(json={"ok": True}))
    before = scrape(worker_metrics_url)
    delivered = value(before, "toolrelay_webhook_deliveries_total", outcome="delivered")
    timed = value(before, "toolrelay_webhook_delivery_seconds_count")
    key = stack.db.run(create_key("telemetry-metrics"))
    with Receiver() as receiver, stack.client(key) as client:
        created = client.post("/v1/webhook-endpoints", json={"url": receiver.url, "event_types": ["receipt.succeeded"]})
        assert created.status_code == 201, created.text
        define(client, api_tool(upstream, "announced_get", "/announced"))
        receipt = submit(client, "announced_get")
        receiver.wait_for(1, type="receipt.succeeded", receipt_id=receipt["id"])
        figures = eventually(worker_metrics_url, "toolrelay_webhook_deliveries_total", delivered + 1,
                             outcome="delivered")
    assert value(figures, "toolrelay_webhook_delivery_seconds_count") >= timed + 1


def test_the_gateway_counts_what_it_accepts_and_shows_the_backlog(stack: Stack, upstream: Upstream) -> None:
    with stack.client() as client:
        created = client.post("/v1/tools", json={"kind": "function", "name": "metered_fn", "description": "x",
                                                 "parameters": {"type": "object"}})
        assert created.status_code == 201, created.text
        first, second = submit(client, "metered_fn"), submit(client, "metered_fn")
        waiting = scrape(f"{stack.base_url}/metrics")
        assert value(waiting, "toolrelay_tool_calls_accepted_total", tool="metered_fn") == 2
        assert value(waiting, "toolrelay_receipts_active", status="waiting") >= 2
        assert client.post(f"/v1/receipts/{first['id']}/cancel").status_code == 200
        after = scrape(f"{stack.base_url}/metrics")
        assert value(after, "toolrelay_tool_calls_finished_total", tool="metered_fn", status="canceled") == 1
        assert value(after, "toolrelay_receipts_active", status="waiting") == value(
            waiting, "toolrelay_receipts_active", status="waiting") - 1
        client.post(f"/v1/receipts/{second['id']}/cancel")


def test_a_gateway_of_several_processes_serves_the_sum_of_them_all(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    try:
        port = free_port()
        base_url = f"http://127.0.0.1:{port}"
        wait_serving(stack.run("gateway", "gateway", "--port", str(port), "--workers", "2"), base_url)
        headers = {"Authorization": f"Bearer {stack.api_key}"}
        for n in range(12):  # a connection each: the two processes take turns at accepting them
            answer = httpx.post(f"{base_url}/v1/tool-calls", json={"tool": "echo", "arguments": {"n": n}},
                                headers=headers, timeout=30)
            assert answer.status_code == 422, answer.text  # no worker has listed echo: each one refused
        figures = [scrape(f"{base_url}/metrics") for _ in range(12)]
        assert {value(f, "toolrelay_tool_calls_rejected_total", reason="unknown_tool") for f in figures} == {12}
    finally:
        stack.close()
