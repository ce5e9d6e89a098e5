"""Identifiers: a prefix and a ULID, so ids sort by creation time and say what they name."""

from __future__ import annotations

from ulid import ULID


def new_id(prefix: str) -> str:
    """A time-sortable unique id such as ``rcpt_01jd3v...``."""
    return f"{prefix}_{str(ULID()).lower()}"
