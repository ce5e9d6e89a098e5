"""What a model reads for a tool call: the receipt's result as text, cut to fit, naming its receipt.

* a success is its output: a string as it is, anything else as JSON;
* a failure is ``error: <code>: <message>``, followed by what to fix (the schema errors by field;
  an unknown tool's message names the tools the model may call);
* every text ends with the receipt that holds the call, ``[receipt rcpt_...]``;
* a text longer than the limit keeps its head and its tail around a marker that says how much was
  left out and which receipt has it all. The receipt itself always keeps every character.
"""

from __future__ import annotations

import json
from typing import Any

from receipts import states
from receipts.records import Receipt

DEFAULT_LIMIT = 16_000
MIN_LIMIT = 200
MAX_LIMIT = 1_000_000
HEAD_SHARE = 0.6  # of what is kept, the head's part: a result's beginning usually says the most


def as_text(value: Any) -> str:
    """A tool output as a model reads it: a string as it is, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def failure_text(error: dict[str, Any] | None) -> str:
    """``error: <code>: <message>`` and the field errors under it, one a line."""
    error = error or {"code": "internal", "message": "the call failed without an error"}
    lines = [f"error: {error.get('code')}: {error.get('message')}"]
    details = error.get("details") or {}
    for item in details.get("errors") or []:
        if isinstance(item, dict):
            lines.append(f"- {item.get('field')}: {item.get('message')}")
    return "\n".join(lines)


def body_of(receipt: Receipt) -> tuple[str, bool]:
    """The text of a terminal receipt's result, and whether it reports a failure."""
    if receipt.status == states.SUCCESS:
        return as_text(receipt.output), False
    if receipt.status == states.PARTIALLY_SUCCEEDED:
        message = (receipt.error or {}).get("message", "")
        return f"partially done: {message}\n{as_text(receipt.output)}", False
    return failure_text(receipt.error), True


def reference(receipt_id: str) -> str:
    return f"\n[receipt {receipt_id}]"


def fit(body: str, receipt_id: str, limit: int) -> str:
    """``body`` and its receipt reference in at most ``limit`` characters, head and tail kept."""
    ref = reference(receipt_id)
    if len(body) + len(ref) <= limit:
        return body + ref
    room = limit - len(ref)
    omitted = len(body)
    for _ in range(3):  # the marker's length depends on the count it names: settle it
        marker = f"\n[... {omitted:,} characters left out; {receipt_id} has the whole output ...]\n"
        keep = max(0, room - len(marker))
        omitted = len(body) - keep
    head = int(keep * HEAD_SHARE)
    tail = keep - head
    return body[:head] + marker + (body[len(body) - tail:] if tail else "") + ref


def content(receipt: Receipt, limit: int = DEFAULT_LIMIT) -> tuple[str, bool]:
    """What a model reads for ``receipt`` (terminal), at most ``limit`` characters, and whether it is an error."""
    body, is_error = body_of(receipt)
    return fit(body, receipt.id, limit), is_error
