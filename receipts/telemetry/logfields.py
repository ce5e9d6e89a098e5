"""The fields a log line carries besides its message: who and what the work in hand is about.

A request or a task binds what it knows (``receipt_id``, ``trace_id``, ``tenant``, ``tool``) in a
context variable, so every line logged while it runs, by any module, carries them; the JSON log
format writes them out. Context variables follow the work: each request's task and each tool's
thread (the runner copies the context) sees its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from types import MappingProxyType

FIELDS = ("receipt_id", "trace_id", "tenant", "tool")
_EMPTY: Mapping[str, str] = MappingProxyType({})
_bound: ContextVar[Mapping[str, str]] = ContextVar("toolrelay_log_fields", default=_EMPTY)


def current() -> Mapping[str, str]:
    """The fields bound in the current context."""
    return _bound.get()


def bind(**fields: str | None) -> Token[Mapping[str, str]]:
    """Add ``fields`` (None values are skipped) to the current context; :func:`unbind` undoes it."""
    given = {name: value for name, value in fields.items() if value is not None}
    return _bound.set({**_bound.get(), **given})


def unbind(token: Token[Mapping[str, str]]) -> None:
    _bound.reset(token)


@contextmanager
def bound(**fields: str | None) -> Iterator[None]:
    """``fields`` bound for the duration of the block."""
    token = bind(**fields)
    try:
        yield
    finally:
        _bound.reset(token)
