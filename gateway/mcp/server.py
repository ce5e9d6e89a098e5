"""``/mcp``: the tenant's catalogue as an MCP server, over streamable HTTP (the ``mcp`` package's server).

``tools/list`` is every tool the key may call (its tenant's, or those its scope names),
``tools/call`` a receipt (:mod:`gateway.mcp.calls`; a read-only key calls nothing). Sessions are
the ``mcp`` package's stateful streamable-HTTP sessions: progress notifications ride the response
stream of the call they belong to, and a client's cancellation reaches the call it names. A session
lives in the gateway process that opened it, so several gateway processes behind one address need
session affinity on ``/mcp`` (the ``Mcp-Session-Id`` header); the receipts, as always, are in the
database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError

from gateway.mcp import results
from gateway.mcp.auth import BearerAuth, caller_from
from gateway.mcp.calls import ToolCalls
from gateway.services import Services
from receipts.catalogue.tools import list_tools
from receipts.errors import Unavailable
from receipts.records import Caller

PATH = "/mcp"
INSTRUCTIONS = ("Every tool call becomes a durable toolrelay receipt: its result carries the receipt id in "
                "_meta['toolrelay/receipt_id'], and _meta['toolrelay/trace_id'] on a call groups it into a trace.")


def _caller(ctx: ServerRequestContext[Any]) -> Caller:
    caller = caller_from(ctx.request)
    if caller is None:  # only a request that passed BearerAuth reaches a handler
        raise MCPError(code=types.INVALID_REQUEST, message="not an authenticated request")
    return caller


class McpEndpoint:
    """The MCP server of one gateway app: its ASGI app (behind Bearer auth) and its session manager.

    Run :meth:`running` in the app's lifespan; mount :attr:`app` at :attr:`path`.
    """

    path = PATH

    def __init__(self, services: Services) -> None:
        self.services = services
        self.calls = ToolCalls(services)
        self.server: Server[Any] = Server("toolrelay", version=version("toolrelay"), instructions=INSTRUCTIONS,
                                          on_list_tools=self._list_tools, on_call_tool=self._call_tool)
        self.manager = StreamableHTTPSessionManager(self.server,
                                                    max_request_body_size=services.settings.max_body_bytes)
        self.app = BearerAuth(self.manager.handle_request)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve MCP sessions until the block ends; then they end, and calls in flight keep running."""
        async with self.manager.run():
            try:
                yield
            finally:
                self.calls.closing = True

    async def _list_tools(self, ctx: ServerRequestContext[Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        caller = _caller(ctx)
        try:
            specs = caller.visible(await self.services.db.arun(list_tools(caller.tenant.id)))
        except Unavailable as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=exc.message) from exc
        return types.ListToolsResult(tools=[results.tool_of(spec) for spec in specs])

    async def _call_tool(self, ctx: ServerRequestContext[Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        return await self.calls.call(ctx.session, _caller(ctx), params)
