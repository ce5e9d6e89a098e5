"""Tools for the MCP server's tests, loaded with TOOLRELAY_TOOL_MODULES (never part of the product).

The ``test_*`` tools are the fixtures the MCP conformance suite's server scenarios call by name
(``tools-call-simple-text``, ``tools-call-error``, ``tools-call-with-progress``), with the results
those scenarios expect. The others serve tests/integration/mcp.
"""

from __future__ import annotations

import time

from toolrelay import ToolError, tool

SIMPLE_TEXT = "This is a simple text response for testing."
ERROR_TEXT = "This tool intentionally returns an error for testing"


@tool
def test_simple_text() -> str:
    """Returns a simple text response (MCP conformance: tools-call-simple-text)."""
    return SIMPLE_TEXT


@tool
def test_error_handling() -> None:
    """Always fails (MCP conformance: tools-call-error)."""
    raise ToolError(ERROR_TEXT)


@tool
def test_tool_with_progress() -> str:
    """Runs for about a tenth of a second; toolrelay reports its progress (MCP conformance:
    tools-call-with-progress)."""
    time.sleep(0.1)
    return "test_tool_with_progress completed"


@tool
def add_numbers(a: float, b: float) -> float:
    """Add two numbers; the output is a bare number."""
    return a + b

