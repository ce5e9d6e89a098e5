"""``mcp``: list and call the tools of an MCP server over streamable HTTP (the ``mcp`` package).

Each session is a client span (``mcp <method>``) in the attempt's trace, and every HTTP request of it
carries that span's ``traceparent``; with tracing on, OpenTelemetry's httpx2 instrumentation makes a
span of each request as well.

The server's URL comes from the tool definition or the stored setup (never from a model's
arguments), its auth headers from the stored setup. The SDK's HTTP client (httpx2) sends on
:class:`~workers.guarded_transport.GuardedTransport2`, the same guarded connection pool as every other
outbound request, so the SSRF guard holds for MCP too.

Errors are mapped where they enter: a server that cannot be reached or times out is a retryable
``upstream_error``/``timeout``; an HTTP or JSON-RPC error from the server is a permanent
``upstream_error``; a tool result flagged ``isError`` is a ``tool_error`` carrying the server's text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from receipts.telemetry import tracing
from workers.egress import USER_AGENT, traced2
from workers.errors import ToolError, ToolFailure, ToolTimeout, UpstreamError
from workers.guarded_transport import GuardedTransport2
from workers.integrations.base import Call, Method, Provider, Values, schema

T = TypeVar("T")
tracer = trace.get_tracer("toolrelay.workers")


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, in order."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def mapped(exc: BaseException, url: str) -> ToolFailure:
    """The receipt error for what the SDK raised (task groups wrap the real cause in exception groups)."""
    leaves = _leaves(exc)
    for leaf in leaves:
        if isinstance(leaf, ToolFailure):
            return leaf  # e.g. Forbidden from the SSRF guard
    for leaf in leaves:
        if isinstance(leaf, httpx2.TimeoutException):
            return ToolTimeout(f"the MCP server at {url} did not answer in time")
        if isinstance(leaf, httpx2.HTTPStatusError):
            status = leaf.response.status_code
            return UpstreamError(f"the MCP server at {url} answered HTTP {status}",
                                 retryable=status in (408, 429) or status >= 500, details={"status_code": status})
        if isinstance(leaf, httpx2.TransportError):
            return UpstreamError(f"cannot reach the MCP server at {url}: {type(leaf).__name__}: {leaf}")
        if isinstance(leaf, MCPError):
            return UpstreamError(f"the MCP server at {url} returned an error: {leaf.error.message}", retryable=False,
                                 details={"code": leaf.error.code, "data": leaf.error.data})
    first = leaves[0]
    return UpstreamError(f"MCP request to {url} failed: {type(first).__name__}: {first}", retryable=False)


async def _session(values: Values, call: Call, method: str, action: Callable[[Client], Awaitable[T]]) -> T:
    url = values["url"]
    transport = GuardedTransport2(call.guard)
    timeout = call.request_timeout()
    with tracer.start_as_current_span(f"mcp {method}", kind=SpanKind.CLIENT,
                                      attributes={"rpc.system": "mcp", "rpc.method": method}):
        headers = {"User-Agent": USER_AGENT, **(values.get("headers") or {})}
        tracing.inject(headers)
        try:
            async with httpx2.AsyncClient(transport=traced2(transport), headers=headers, trust_env=False,
                                          timeout=httpx2.Timeout(timeout)) as http, \
                    Client(streamable_http_client(url, http_client=http), read_timeout_seconds=timeout,
                           cache=None) as client:
                return await action(client)
        except ToolFailure:
            raise
        except Exception as exc:  # noqa: BLE001 - every SDK failure is mapped to the error vocabulary
            raise mapped(exc, url) from None


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def list_tools(values: Values, call: Call) -> dict[str, Any]:
    result = await _session(values, call, "tools/list", lambda client: client.list_tools())
    return {"tools": [{"name": tool.name, "description": tool.description or "",
                       "input_schema": tool.input_schema} for tool in result.tools]}


async def call_tool(values: Values, call: Call) -> dict[str, Any]:
    result = await _session(values, call, "tools/call",
                            lambda client: client.call_tool(values["tool"], values.get("arguments")))
    content = [_dump(block) for block in result.content]
    if result.is_error:
        text = " ".join(block.get("text", "") for block in content if block.get("type") == "text").strip()
        raise ToolError(f"the MCP tool {values['tool']!r} failed: {text or 'no message'}",
                        details={"content": content})
    return {"content": content, "structured_content": result.structured_content, "is_error": False}


SETUP = schema({
    "url": {"type": "string", "pattern": "^https?://", "description": "The server's streamable HTTP endpoint."},
    "headers": {"type": "object", "additionalProperties": {"type": "string"}, "writeOnly": True,
                "description": "Sent with every request, e.g. Authorization."},
}, ["url"])

PROVIDER = Provider(
    name="mcp",
    description="Tools of a Model Context Protocol server, over streamable HTTP.",
    setup=SETUP,
    methods=(
        Method(name="list_tools", description="List the tools the MCP server offers, with their input schemas.",
               arguments=schema({}), output=schema({"tools": {"type": "array"}}, ["tools"]), run=list_tools),
        Method(name="call_tool", description="Call one tool of the MCP server with arguments.",
               arguments=schema({"tool": {"type": "string", "minLength": 1},
                                 "arguments": {"type": "object", "default": {}}}, ["tool"]),
               output=schema({"content": {"type": "array"}, "structured_content": {},
                              "is_error": {"type": "boolean"}}, ["content"]),
               run=call_tool, effect="write", idempotent=False),
    ),
)
