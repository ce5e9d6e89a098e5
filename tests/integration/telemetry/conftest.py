"""A deployment with telemetry on: tracing exported to a local OTLP collector, JSON logs on each
process's standard error, and the worker's ``/metrics`` on a port of its own.

Loopback is allow-listed so the worker reaches the local upstream (an api_call tool's server) and
webhook receiver.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.collector import Collector, collecting
from tests.support.stack import Stack, free_port, running_stack
from tests.support.upstreams import Upstream, serving

TRACE_ENV = {
    "OTEL_TRACES_EXPORTER": "otlp",
    "OTEL_BSP_SCHEDULE_DELAY": "100",  # export every 100 ms, so a test sees spans soon after they end
}


@pytest.fixture(scope="package")
def collector() -> Iterator[Collector]:
    with collecting() as running:
        yield running


@pytest.fixture(scope="package")
def upstream() -> Iterator[Upstream]:
    with serving() as running:
        yield running


@pytest.fixture(scope="package")
def worker_metrics_url() -> str:
    return f"http://127.0.0.1:{free_port()}/metrics"


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory, collector: Collector, worker_metrics_url: str) -> Iterator[Stack]:
    port = int(worker_metrics_url.rsplit(":", 1)[1].split("/")[0])
    with running_stack(tmp_path_factory.mktemp("telemetry"), env={**TRACE_ENV, "OTEL_EXPORTER_OTLP_ENDPOINT":
                                                                     collector.endpoint},
                       split_stderr=True, outbound_allow_cidrs="127.0.0.0/8", log_format="json",
                       metrics_port=port) as running:
        yield running


def api_tool(upstream: Upstream, name: str, path: str, **extra: Any) -> dict[str, Any]:
    """An api_call tool that GETs ``path`` of ``upstream``."""
    return {"kind": "api_call", "name": name, "description": f"{name} for tests",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
            "request": {"method": "GET", "url": upstream.url(path)}, **extra}


def define(client: httpx.Client, body: dict[str, Any]) -> None:
    response = client.post("/v1/tools", json=body)
    assert response.status_code == 201, response.text


def submit(client: httpx.Client, tool: str, arguments: dict[str, Any] | None = None,
           headers: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    response = client.post("/v1/tool-calls", json={"tool": tool, "arguments": arguments or {}, **extra},
                           headers=headers or {})
    assert response.status_code in (200, 202), response.text
    return response.json()  # type: ignore[no-any-return]
