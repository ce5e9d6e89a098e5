"""One real deployment for the tool-kind tests: gateway, Celery worker and beat on PostgreSQL and Redis,
with loopback allow-listed so the workers can reach the local fakes (HTTP upstream imitating MediaWiki
and Open-Meteo, an SMTP server, an MCP server). Tests use their own tool names, so they share it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.mcp_server import mcp_server
from tests.support.stack import Stack, running_stack
from tests.support.upstreams import Reply, Upstream, mediawiki, open_meteo, serving

MAX_BYTES = 64 * 1024


@pytest.fixture(scope="package")
def upstream() -> Iterator[Upstream]:
    with serving() as running:
        running.route("/w/api.php", mediawiki).route("/v1/forecast", open_meteo).route("/hook", Reply(204))
        yield running


@pytest.fixture(scope="package")
def mcp_url() -> Iterator[str]:
    with mcp_server() as url:
        yield url


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("kinds"), outbound_allow_cidrs="127.0.0.0/8",
                       wikipedia_base_url=upstream.url("/w/api.php"), weather_base_url=upstream.url("/v1/forecast"),
                       http_max_bytes=MAX_BYTES, outbound_timeout_s=5) as running:
        yield running


def define(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/tools", json=body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def submit(client: httpx.Client, tool: str, arguments: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    response = client.post("/v1/tool-calls", json={"tool": tool, "arguments": arguments or {}, **extra})
    assert response.status_code in (200, 202), response.text
    return response.json()  # type: ignore[no-any-return]


def run(stack: Stack, client: httpx.Client, tool: str, arguments: dict[str, Any] | None = None,
        timeout: float = 60, key: str | None = None, **extra: Any) -> dict[str, Any]:
    """Submit a call and wait for its terminal receipt (``key``: the client's API key, if not the main one)."""
    receipt = submit(client, tool, arguments, **extra)
    return stack.wait_terminal(receipt["id"], timeout=timeout, key=key)
