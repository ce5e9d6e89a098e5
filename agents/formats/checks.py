"""Reading a vendor's envelope: the field errors that make a message malformed, named by path."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agents.errors import MalformedMessage


class Problems:
    """Field errors collected while reading a message; :meth:`raise_any` raises them all at once."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.errors: list[dict[str, str]] = []

    def add(self, field: str, message: str) -> None:
        self.errors.append({"field": field, "message": message})

    def raise_any(self) -> None:
        if self.errors:
            raise MalformedMessage(f"the message is not {self.what}", errors=self.errors)


def unique_ids(ids: Sequence[str], field_of: Callable[[int], str], problems: Problems) -> None:
    """Each call's id must be unique in the message: it is how each result finds its call. ``field_of(i)``
    names the field of ``ids[i]`` (only a repeated id needs its name)."""
    if len(set(ids)) == len(ids):
        return
    seen: dict[str, str] = {}
    for i, call_id in enumerate(ids):
        if call_id in seen:
            problems.add(field_of(i), f"the id {call_id!r} is used by {seen[call_id]} too; every call needs its own")
        seen.setdefault(call_id, field_of(i))


def text(value: Any, field: str, problems: Problems, *, max_length: int = 200) -> str | None:
    """A non-empty string of at most ``max_length`` characters, or a problem recorded."""
    if not isinstance(value, str) or not value:
        problems.add(field, "a non-empty string is required")
        return None
    if len(value) > max_length:
        problems.add(field, f"at most {max_length} characters")
        return None
    return value


def no_calls(field: str, what: str) -> MalformedMessage:
    return MalformedMessage(f"the message holds no tool call: {what}", errors=[{"field": field, "message": what}])
