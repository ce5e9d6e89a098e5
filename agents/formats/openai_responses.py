"""OpenAI Responses: the response's ``output`` list in (its ``function_call`` items are the calls, every
other item is ignored), one ``function_call_output`` item per call out.

In: ``[{"type": "function_call", "call_id", "name", "arguments": "<JSON text>"}, ...]`` (the whole
response object is accepted too: its ``output`` is read). Out: ``{"type": "function_call_output",
"call_id", "output"}`` per call, in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.calls import ToolCall, ToolResult, arguments_from_json
from agents.formats.base import Format
from agents.formats.checks import Problems, no_calls, text, unique_ids


def calls(message: Any) -> list[ToolCall]:
    problems = Problems("an OpenAI Responses output list")
    field = "message"
    if isinstance(message, dict) and isinstance(message.get("output"), list):
        message, field = message["output"], "message.output"
    if not isinstance(message, list):
        problems.add("message", "the response's output list is required: [{\"type\": \"function_call\", ...}]")
        problems.raise_any()
    found: list[ToolCall] = []
    fields: list[str] = []
    for i, item in enumerate(message):
        where = f"{field}.{i}"
        if not isinstance(item, dict):
            problems.add(where, "an output item object is required")
            continue
        if item.get("type") != "function_call":
            continue  # messages, reasoning, and other tools' calls are not ours to answer
        call_id = text(item.get("call_id"), f"{where}.call_id", problems)
        name = text(item.get("name"), f"{where}.name", problems)
        if call_id is None or name is None:
            continue
        arguments, problem = arguments_from_json(item.get("arguments", ""))
        found.append(ToolCall(call_id, name, arguments, problem))
        fields.append(f"{where}.call_id")
    problems.raise_any()
    if not found:
        raise no_calls(field, "the output has no function_call item")
    unique_ids([c.call_id for c in found], fields.__getitem__, problems)
    problems.raise_any()
    return found


def messages(results: Sequence[ToolResult]) -> list[dict[str, Any]]:
    return [{"type": "function_call_output", "call_id": r.call.call_id, "output": r.content} for r in results]


FORMAT = Format("openai_responses", calls, messages)
