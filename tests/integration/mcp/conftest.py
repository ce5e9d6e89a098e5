"""One deployment for the MCP server's tests (gateway, Celery worker and beat as processes), and an
MCP client session over real HTTP: the ``mcp`` package's own client (``ClientSession``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.support.stack import Stack, running_stack

TOOL_MODULES = "tests.support.tools,tests.support.mcp_fixtures"


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("mcp"), tool_modules=TOOL_MODULES) as running:
        yield running


@asynccontextmanager
async def connect(stack: Stack, key: str | None = None) -> AsyncIterator[ClientSession]:
    """An initialized MCP session with ``/mcp``, authenticated with ``key`` (the stack's own by default)."""
    headers = {"Authorization": f"Bearer {key or stack.api_key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http, \
            streamable_http_client(f"{stack.base_url}/mcp", http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


def receipts_of(stack: Stack, trace_id: str, key: str | None = None) -> list[dict[str, Any]]:
    with stack.client(key) as client:
        response = client.get("/v1/receipts", params={"trace_id": trace_id})
        assert response.status_code == 200, response.text
        return response.json()["data"]  # type: ignore[no-any-return]


def get_receipt(stack: Stack, receipt_id: str, key: str | None = None) -> httpx.Response:
    with stack.client(key) as client:
        return client.get(f"/v1/receipts/{receipt_id}")
