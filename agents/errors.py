"""Errors of the agents layer.

::

    AgentsError
    └── MalformedMessage     the envelope a vendor's message came in is not that vendor's shape,
                             or holds no tool call at all (a 422 naming the fields at fault)

What a model got wrong inside a well-formed message (arguments that are not JSON, an unknown tool,
arguments that fail the schema) is not an error here: each becomes a failed receipt and a message
the model can act on.
"""

from __future__ import annotations


class AgentsError(Exception):
    """Agents error."""

    def __init__(self, message: str | None = None) -> None:
        self.message = message or (self.__doc__ or "").strip()
        super().__init__(self.message)


class MalformedMessage(AgentsError):
    """The message is not in the format it says it is in."""

    def __init__(self, message: str | None = None, *, errors: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []
