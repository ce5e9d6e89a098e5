"""What the MCP server says: catalogue entries as MCP tools, receipts and refusals as tool results.

Pure functions, no I/O. A result is what a model reads: one text block (a string output as is,
anything else as its JSON; a failure as ``error: <code>: <message>``), the output again as
``structuredContent`` when it is a JSON object, and the receipt's id in ``_meta``.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from receipts import states
from receipts.records import Receipt, ToolSpec

RECEIPT_ID = "toolrelay/receipt_id"
TRACE_ID = "toolrelay/trace_id"
CALL_ID = "toolrelay/call_id"
STATUS = "toolrelay/status"


def annotations_of(spec: ToolSpec) -> types.ToolAnnotations:
    """The contract a tool declares, as MCP hints.

    A read is read-only; ``idempotentHint`` is the declared ``idempotent``; a non-idempotent write is
    destructive. Whether an idempotent write destroys anything is not part of the contract, so that
    hint is left out (a client then assumes the worst, the protocol's default).
    """
    read_only = spec.effect == "read"
    destructive = None if read_only or spec.idempotent else True
    return types.ToolAnnotations(read_only_hint=read_only, idempotent_hint=spec.idempotent,
                                 destructive_hint=destructive)


def tool_of(spec: ToolSpec) -> types.Tool:
    """A catalogue entry as an MCP tool: its stored schema, description and contract."""
    return types.Tool(name=spec.name, description=spec.description or None, input_schema=spec.parameters,
                      annotations=annotations_of(spec))


def text_of(output: Any) -> str:
    """A tool's output as the text a model reads: a string as is, anything else as JSON."""
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def error_text(code: str, message: str) -> str:
    return f"error: {code}: {message}"


def _result(text: str, *, is_error: bool, structured: Any = None,
            meta: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=structured,
                                is_error=is_error, _meta=meta)


def receipt_result(receipt: Receipt) -> types.CallToolResult:
    """A receipt as the answer to ``tools/call``.

    A success (or partial success) gives its output; a failed or canceled receipt its error, with
    ``isError``; a receipt still in flight (its deadline passed before it settled) says so, as an error
    the model can read, and where to look for the outcome.
    """
    meta = {RECEIPT_ID: receipt.id, TRACE_ID: receipt.trace_id, STATUS: receipt.status}
    if receipt.status in (states.SUCCESS, states.PARTIALLY_SUCCEEDED):
        output = receipt.output
        return _result(text_of(output), is_error=False, structured=output if isinstance(output, dict) else None,
                       meta=meta)
    if receipt.terminal:
        error = receipt.error or {}
        return _result(error_text(str(error.get("code", "internal")), str(error.get("message", receipt.status))),
                       is_error=True, meta=meta)
    return _result(error_text("timeout", f"receipt {receipt.id} is still {receipt.status} after its deadline; "
                                         f"GET /v1/receipts/{receipt.id} has its outcome"), is_error=True, meta=meta)


def client_run_result(receipt: Receipt) -> types.CallToolResult:
    """The answer for a function (client-run) tool: toolrelay does not run it, its client does.

    The receipt stays ``waiting`` until that client posts the result (or it expires), so the call is
    answered at once rather than held open for a deadline of up to days.
    """
    meta = {RECEIPT_ID: receipt.id, TRACE_ID: receipt.trace_id, STATUS: receipt.status}
    return _result(f"tool {receipt.tool!r} runs on the client, not in toolrelay: receipt {receipt.id} waits for "
                   f"its result at POST /v1/receipts/{receipt.id}/result", is_error=True, meta=meta)


def unknown_tool(name: str, available: list[str]) -> types.CallToolResult:
    """An unknown tool: a tool error naming the tools this key may use (nothing is stored)."""
    names = ", ".join(available) if available else "none"
    return _result(error_text("not_found", f"no tool named {name!r}; the tools you may use are: {names}"),
                   is_error=True)


def refused(message: str) -> types.CallToolResult:
    """A call the key may not make (read-only, or limited to other tools): a tool error (nothing is stored)."""
    return _result(error_text("forbidden", message), is_error=True)


def invalid_arguments(message: str, errors: list[dict[str, str]]) -> types.CallToolResult:
    """Arguments (or ``_meta`` fields) that do not fit: every problem, by field (nothing is stored)."""
    details = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
    return _result(error_text("invalid_arguments", f"{message}: {details}" if details else message), is_error=True)


def unavailable(receipt_id: str | None) -> types.CallToolResult:
    """The database could not be reached: say whether the call was accepted before it went away."""
    if receipt_id is None:
        return _result(error_text("internal", "toolrelay's database is unavailable; nothing was stored, "
                                              "try again shortly"), is_error=True)
    return _result(error_text("internal", f"the call was accepted as {receipt_id}, but its outcome cannot be read "
                                          f"now; GET /v1/receipts/{receipt_id} shortly"),
                   is_error=True, meta={RECEIPT_ID: receipt_id})
