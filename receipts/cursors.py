"""Keyset pagination: every list of the API pages the same way, with an opaque ``next_cursor``.

A cursor is the position of the last item of a page (the values the list is ordered by) and the
name of the list it belongs to, as URL-safe base64 of a small JSON array. The next page is the rows
strictly after that position, so pages stay correct while rows are added, and a cursor from one list
handed to another is refused instead of silently starting somewhere odd.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import TypeVar

from receipts.errors import InvalidInput
from receipts.records import Page

T = TypeVar("T")
# Every list is ordered by text values (ids, and timestamps as ISO-8601 text).
Position = tuple[str, ...]


class InvalidCursor(InvalidInput):
    """Not a cursor from this list's next_cursor."""

    def __init__(self) -> None:
        super().__init__(errors=[{"field": "cursor", "message": "not a cursor from next_cursor"}])


def encode(kind: str, position: Position) -> str:
    """The cursor of ``position`` in the list ``kind``."""
    raw = json.dumps([kind, *position], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(kind: str, cursor: str, width: int) -> Position:
    """The position a cursor of the list ``kind`` points at (``width`` values).

    Raises:
        InvalidCursor: it is not such a cursor.
    """
    try:
        raw = base64.urlsafe_b64decode((cursor + "=" * (-len(cursor) % 4)).encode())
        value = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidCursor() from None
    # Anything but text (or text with a NUL, which PostgreSQL cannot hold) would fail the list's
    # statement instead of being refused here.
    if (not isinstance(value, list) or len(value) != width + 1 or value[0] != kind
            or not all(isinstance(part, str) and "\x00" not in part for part in value[1:])):
        raise InvalidCursor()
    return tuple(value[1:])


def check(kind: str, cursor: str | None, width: int = 1) -> Position | None:
    """:func:`decode` for an optional cursor (None: the first page)."""
    return None if cursor is None else decode(kind, cursor, width)


def page(kind: str, items: Sequence[T], position: Callable[[T], Position], *, more: bool) -> Page:
    """A page of ``items`` with the cursor of its last item when ``more`` follow (the usual way to know:
    fetch ``limit + 1`` rows and see whether the extra one came)."""
    next_cursor = encode(kind, position(items[-1])) if more and items else None
    return Page(items=list(items), next_cursor=next_cursor)
