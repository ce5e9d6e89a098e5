"""The catalogue in the vendors' ``tools`` formats: what a model is offered."""

from __future__ import annotations

from typing import Any

from receipts.records import ToolSpec


def openai_tool(spec: ToolSpec) -> dict[str, Any]:
    """A Chat Completions ``tools`` entry."""
    return {"type": "function",
            "function": {"name": spec.name, "description": spec.description, "parameters": spec.parameters}}


def anthropic_tool(spec: ToolSpec) -> dict[str, Any]:
    """An Anthropic Messages ``tools`` entry."""
    return {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}
