"""toolrelay: durable, verifiable execution of LLM tool calls.

The public Python API for tool authors::

    from toolrelay import tool, ToolContext, ToolError, RetryableError

    @tool(effect="write", idempotent=False, timeout_s=10)
    def send_email(to: str, subject: str, body: str, ctx: ToolContext) -> dict:
        \"\"\"Send an email.\"\"\"
        ...  # use ctx.receipt_id as the downstream idempotency key
"""

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
