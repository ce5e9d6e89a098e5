"""A model's tool call, read out of its vendor's message, and what goes back to the model for it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from receipts import jsoncodec, storable


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call as the model made it.

    ``arguments`` is the JSON object the model passed, or None when what it passed is not one; then
    ``problem`` says what is wrong with it (the model reads that in the tool's result).
    """

    call_id: str
    name: str
    arguments: dict[str, Any] | None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The text a model reads for one call, and whether it reports a failure."""

    call: ToolCall
    content: str
    is_error: bool


def arguments_from_json(text: Any) -> tuple[dict[str, Any] | None, str | None]:
    """A call's arguments from the JSON string a model wrote: ``(object, None)`` or ``(None, problem)``.

    An object holding what PostgreSQL cannot store (:mod:`receipts.storable`) is a problem too: the
    model is told which field to fix, and the receipt keeps no input.
    """
    if not isinstance(text, str):
        return None, "the arguments must be a JSON object encoded as a string"
    if not text.strip():
        return {}, None  # some models send "" for a call without arguments
    try:
        value = jsoncodec.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"the arguments are not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    except (ValueError, RecursionError) as exc:  # an integer of over 4300 digits; nesting too deep to read
        return None, f"the arguments cannot be read: {exc}"
    if not isinstance(value, dict):
        return None, f"the arguments must be a JSON object, not {type(value).__name__}"
    unstorable = storable.fault(value)
    if unstorable is not None:
        path, reason = unstorable
        return None, f"the arguments cannot be stored: {storable.field_name(path, 'arguments')} {reason}"
    return value, None
