"""toolrelay: durable, verifiable execution of LLM tool calls.

The public Python API for tool authors::

    from toolrelay import tool, ToolContext, ToolError, RetryableError

    @tool(effect="write", idempotent=False, timeout_s=10)
    def send_email(to: str, subject: str, body: str, ctx: ToolContext) -> dict:
        \"\"\"Send an email.\"\"\"
        ...  # use ctx.receipt_id as the downstream idempotency key

and for callers, the SDK in :mod:`toolrelay.client`. The tool authors' names are imported from
``workers`` when first used, so ``import toolrelay.client`` loads none of the server's code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.context import ToolContext
    from workers.errors import (
        InvalidArguments,
        PartialSuccess,
        RetryableError,
        ToolError,
        ToolTimeout,
        UpstreamError,
    )
    from workers.registry import tool

# Each public name and the module that defines it.
EXPORTS = {
    "InvalidArguments": "workers.errors",
    "PartialSuccess": "workers.errors",
    "RetryableError": "workers.errors",
    "ToolContext": "workers.context",
    "ToolError": "workers.errors",
    "ToolTimeout": "workers.errors",
    "UpstreamError": "workers.errors",
    "tool": "workers.registry",
}

__all__ = [
    "InvalidArguments",
    "PartialSuccess",
    "RetryableError",
    "ToolContext",
    "ToolError",
    "ToolTimeout",
    "UpstreamError",
    "tool",
]


def __getattr__(name: str) -> Any:
    """Import a tool author's name from its module on first use (PEP 562)."""
    module = EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'toolrelay' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
