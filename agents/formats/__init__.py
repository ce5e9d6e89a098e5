"""The vendors' formats: a model's message in, its tool calls out; tool results in, the messages to append out.

Each format is a module-level :class:`Format` (``openai_chat``, ``openai_responses``, ``anthropic``):
``calls(message)`` reads the calls in the order the model made them (raising
:class:`~agents.errors.MalformedMessage` for an envelope that is not the vendor's shape, or holds no
call), and ``messages(results)`` writes what the caller appends before calling the model again,
in that order, ids matched.
"""

from __future__ import annotations

from agents.formats import anthropic, openai_chat, openai_responses
from agents.formats.base import Format

FORMATS: dict[str, Format] = {f.name: f for f in (openai_chat.FORMAT, openai_responses.FORMAT, anthropic.FORMAT)}

__all__ = ["FORMATS", "Format"]
