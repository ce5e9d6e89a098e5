"""OpenAI Chat Completions: the assistant message's ``tool_calls`` in, one ``role: tool`` message per call out.

In: ``{"role": "assistant", "tool_calls": [{"id", "type": "function", "function": {"name", "arguments":
"<JSON text>"}}, ...]}``. Out: ``{"role": "tool", "tool_call_id", "content"}`` per call, in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.calls import ToolCall, ToolResult, arguments_from_json
from agents.formats.base import Format
from agents.formats.checks import Problems, no_calls, text, unique_ids


def calls(message: Any) -> list[ToolCall]:
    problems = Problems("an OpenAI Chat assistant message with tool_calls")
    if not isinstance(message, dict):
        problems.add("message", 'an assistant message object is required: {"role": "assistant", "tool_calls": [...]}')
        problems.raise_any()
    if message.get("role", "assistant") != "assistant":
        problems.add("message.role", 'must be "assistant"')
    items = message.get("tool_calls")
    if items is None or items == []:
        problems.raise_any()
        raise no_calls("message.tool_calls", "the assistant message has no tool_calls")
    if not isinstance(items, list):
        problems.add("message.tool_calls", "must be a list")
        problems.raise_any()
    found: list[ToolCall] = []
    for i, item in enumerate(items):
        field = f"message.tool_calls.{i}"
        if not isinstance(item, dict):
            problems.add(field, "a tool call object is required")
            continue
        call_id = text(item.get("id"), f"{field}.id", problems)
        kind = item.get("type", "function")
        body = item.get(kind) if isinstance(kind, str) else None
        if not isinstance(body, dict):
            problems.add(f"{field}.{kind if isinstance(kind, str) else 'type'}", "a function object is required")
            continue
        name = text(body.get("name"), f"{field}.{kind}.name", problems)
        if kind != "function":  # a custom tool's call still needs its answer: that it cannot run here
            if call_id is not None and name is not None:
                found.append(ToolCall(call_id, name, None, f"only function tools run here, not {kind!r} tools"))
            continue
        if call_id is None or name is None:
            continue
        arguments, problem = arguments_from_json(body.get("arguments", ""))
        found.append(ToolCall(call_id, name, arguments, problem))
    problems.raise_any()
    unique_ids([c.call_id for c in found], lambda i: f"message.tool_calls.{i}.id", problems)
    problems.raise_any()
    return found


def messages(results: Sequence[ToolResult]) -> list[dict[str, Any]]:
    return [{"role": "tool", "tool_call_id": r.call.call_id, "content": r.content} for r in results]


FORMAT = Format("openai_chat", calls, messages)
