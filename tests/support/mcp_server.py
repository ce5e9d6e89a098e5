"""A real MCP server (built with the ``mcp`` package) on a loopback port, over streamable HTTP.

Tools: ``add`` (returns a + b), ``shout`` (upper-cases text) and ``explode`` (always raises, which
the server reports as a tool result with ``isError``). It runs on uvicorn in a thread; the headers
of every HTTP request it gets can be kept in a list the test hands in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer

from tests.support.stack import free_port


def build() -> MCPServer:
    server: MCPServer = MCPServer("toolrelay-test")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    @server.tool()
    def explode(reason: str) -> str:
        """Always fails."""
        raise ValueError(f"exploded: {reason}")

    return server


def recording(app: Any, seen: list[dict[str, str]]) -> Any:
    """``app``, keeping each HTTP request's headers (names lower-cased) in ``seen``."""

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append({name.decode().lower(): value.decode() for name, value in scope["headers"]})
        await app(scope, receive, send)

    return asgi


@contextmanager
def mcp_server(seen: list[dict[str, str]] | None = None) -> Iterator[str]:
    """Serve the test MCP server; yields its endpoint URL (``http://127.0.0.1:PORT/mcp``).

    ``seen``, if given, gets the headers of every request the server receives."""
    port = free_port()
    app = build().streamable_http_app()
    server = uvicorn.Server(uvicorn.Config(recording(app, seen) if seen is not None else app, host="127.0.0.1",
                                           port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name=f"mcp-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the MCP test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
