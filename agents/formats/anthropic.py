"""Anthropic Messages: the assistant message's ``tool_use`` blocks in, one user message of ``tool_result``
blocks out.

In: ``{"role": "assistant", "content": [{"type": "tool_use", "id", "name", "input": {...}}, ...]}``
(other blocks, such as text, are ignored). Out: ONE ``{"role": "user", "content": [...]}`` whose
content is a ``tool_result`` block per call, in order and nothing before them (the API requires the
results first and together): ``{"type": "tool_result", "tool_use_id", "content", "is_error"}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.calls import ToolCall, ToolResult
from agents.formats.base import Format
from agents.formats.checks import Problems, no_calls, text, unique_ids


def calls(message: Any) -> list[ToolCall]:
    problems = Problems("an Anthropic assistant message with tool_use blocks")
    if not isinstance(message, dict):
        problems.add("message", 'an assistant message object is required: {"role": "assistant", "content": [...]}')
        problems.raise_any()
    if message.get("role", "assistant") != "assistant":
        problems.add("message.role", 'must be "assistant"')
    blocks = message.get("content")
    if isinstance(blocks, str) or blocks is None or blocks == []:
        problems.raise_any()
        raise no_calls("message.content", "the message has no tool_use block")
    if not isinstance(blocks, list):
        problems.add("message.content", "must be a list of content blocks")
        problems.raise_any()
    found: list[ToolCall] = []
    fields: list[str] = []
    for i, block in enumerate(blocks):
        where = f"message.content.{i}"
        if not isinstance(block, dict):
            problems.add(where, "a content block object is required")
            continue
        if block.get("type") != "tool_use":
            continue
        call_id = text(block.get("id"), f"{where}.id", problems)
        name = text(block.get("name"), f"{where}.name", problems)
        if call_id is None or name is None:
            continue
        arguments = block.get("input", {})
        if isinstance(arguments, dict):
            found.append(ToolCall(call_id, name, arguments))
        else:
            problem = f"the input must be a JSON object, not {type(arguments).__name__}"
            found.append(ToolCall(call_id, name, None, problem))
        fields.append(f"{where}.id")
    problems.raise_any()
    if not found:
        raise no_calls("message.content", "the message has no tool_use block")
    unique_ids([c.call_id for c in found], fields.__getitem__, problems)
    problems.raise_any()
    return found


def messages(results: Sequence[ToolResult]) -> list[dict[str, Any]]:
    blocks = [{"type": "tool_result", "tool_use_id": r.call.call_id, "content": r.content, "is_error": r.is_error}
              for r in results]
    return [{"role": "user", "content": blocks}]


FORMAT = Format("anthropic", calls, messages)
