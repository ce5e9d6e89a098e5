"""A vendor's format, as the functions that read its calls and write its results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agents.calls import ToolCall, ToolResult


@dataclass(frozen=True)
class Format:
    """A vendor's way of carrying tool calls and their results."""

    name: str
    calls: Callable[[Any], list[ToolCall]]
    messages: Callable[[Sequence[ToolResult]], list[dict[str, Any]]]
