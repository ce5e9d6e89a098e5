"""What PostgreSQL can store: values checked before they are written, so a refusal changes nothing.

JSON can carry values that PostgreSQL's ``text`` and ``jsonb`` cannot hold, and that would otherwise
fail the statement that stores them (a 500 after the request was accepted as valid):

* a NUL character (``\\u0000``) in a string or an object key: ``text`` cannot hold it, and ``jsonb``
  refuses the escape;
* a lone surrogate (``\\ud800`` without its pair): not a character, so there is no UTF-8 for it;
* a number that is not finite: Python's JSON parser reads ``NaN``, ``Infinity`` and a literal too
  large for a double (``1e400``) as floats that JSON itself has no way to write.

:func:`check` walks a parsed JSON value (iteratively: a deep value costs no recursion) and raises
:class:`~receipts.errors.InvalidInput` naming the first field at fault. A value with no fault, the
common case, costs one pass with no bookkeeping (about a microsecond for a typical tool call's body,
less than parsing it), so the check sits on the hot path of every submitted call.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from receipts.errors import InvalidInput

NUL = "\x00"
SURROGATE = re.compile("[\ud800-\udfff]")

NUL_MESSAGE = "contains a NUL character (\\u0000), which PostgreSQL cannot store"
SURROGATE_MESSAGE = ("contains a lone surrogate (an unpaired \\ud800-\\udfff), which is no character and cannot "
                     "be stored")
NUMBER_MESSAGE = "must be a finite number: NaN, Infinity and numbers beyond a double's range are not JSON"

Path = tuple[str | int, ...]
Trail = tuple[Any, Any] | None  # (key, the parent's trail)


def text_fault(value: str) -> str | None:
    """Why the string ``value`` cannot be stored, or None."""
    if NUL in value:
        return NUL_MESSAGE
    if not value.isascii() and SURROGATE.search(value) is not None:
        return SURROGATE_MESSAGE
    return None


def fault(value: Any) -> tuple[Path, str] | None:
    """The path to the first part of the JSON value ``value`` that cannot be stored, and why; or None.

    The common case, a value that can be stored, takes one pass that tracks no paths; only a value
    with a fault is walked again, to name where it is.
    """
    return None if _clean(value) else _locate(value)


def _clean(value: Any) -> bool:
    """Whether every part of ``value`` can be stored (exact JSON types on the fast path)."""
    stack = [value]
    pop, push = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str:
            if NUL in item or (not item.isascii() and SURROGATE.search(item) is not None):
                return False
        elif kind is dict:
            for key in item:
                if type(key) is not str or NUL in key or (not key.isascii() and SURROGATE.search(key) is not None):
                    return False  # a key that is no string goes to the thorough walk too
            push(item.values())
        elif kind is list:
            push(item)
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif not (item is None or kind is int or kind is bool):
            return False  # anything else (a tuple, a Mapping, a subclass): the thorough walk decides
    return True


def _locate(value: Any) -> tuple[Path, str] | None:
    # Each part keeps its trail as (key, parent's trail), so a deep value costs no quadratic copying.
    stack: list[tuple[Any, Trail]] = [(value, None)]
    while stack:
        item, trail = stack.pop()
        if isinstance(item, str):
            reason = text_fault(item)
            if reason is not None:
                return _path(trail), reason
        elif isinstance(item, float):
            if not math.isfinite(item):
                return _path(trail), NUMBER_MESSAGE
        elif isinstance(item, Mapping):
            for key, child in item.items():
                if isinstance(key, str):
                    reason = text_fault(key)
                    if reason is not None:
                        return _path((key, trail)), f"is a key that {reason}"
                stack.append((child, (key, trail)))
        elif isinstance(item, list | tuple):
            stack.extend((child, (index, trail)) for index, child in enumerate(item))
    return None


def _path(trail: Trail) -> Path:
    parts: list[str | int] = []
    while trail is not None:
        key, trail = trail
        parts.append(key)
    return tuple(reversed(parts))


def mended(value: Any) -> Any:
    """``value`` with every string and key PostgreSQL cannot hold made storable: each NUL becomes U+FFFD
    (the replacement character), each lone surrogate ``?``. For what toolrelay must record as it came (a
    tool's output, an error's message, a model's answer) rather than refuse. ``value`` itself where nothing
    needs mending, the common case."""
    if _clean_texts(value):
        return value
    return _mend(value)


def _mend(value: Any) -> Any:
    if isinstance(value, str):
        return _mend_text(value)
    if isinstance(value, Mapping):
        return {(_mend_text(key) if isinstance(key, str) else key): _mend(child) for key, child in value.items()}
    if isinstance(value, list | tuple):
        return [_mend(child) for child in value]
    return value


def _mend_text(text: str) -> str:
    if text_fault(text) is None:
        return text
    return text.replace(NUL, "\ufffd").encode("utf-8", "replace").decode("utf-8")


def _clean_texts(value: Any) -> bool:
    """Whether no string or key in ``value`` needs mending (numbers are not looked at)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if text_fault(item) is not None:
                return False
        elif isinstance(item, Mapping):
            if any(isinstance(key, str) and text_fault(key) is not None for key in item):
                return False
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return True


def field_name(path: Iterable[str | int], prefix: str = "") -> str:
    """``path`` as a dotted field name (``arguments.items.0``), its parts escaped so that the name
    itself can be shown: a NUL or a lone surrogate in a key is written as its escape."""
    parts = [prefix] if prefix else []
    for part in path:
        text = str(part).replace(NUL, "\\u0000")
        parts.append(text.encode("utf-8", "backslashreplace").decode("utf-8"))
    return ".".join(parts) or "body"


def check(value: Any, *, field: str = "") -> None:
    """Raise :class:`InvalidInput` (a 422) if any part of the JSON value ``value`` cannot be stored.

    ``field`` names ``value`` itself in the error (``""``: the request body, whose fields are named
    alone, as in every validation error).
    """
    found = fault(value)
    if found is not None:
        path, reason = found
        refuse(field_name(path, field), reason)


def check_texts(values: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
    """Raise :class:`InvalidInput` if a named string (a path or query parameter) cannot be stored."""
    items = values.items() if isinstance(values, Mapping) else values
    for name, text in items:
        reason = text_fault(text) if isinstance(text, str) else None
        if reason is not None:
            refuse(field_name([name]), reason)


def refuse(field: str, reason: str) -> NoReturn:
    """Raise the 422 naming ``field``."""
    raise InvalidInput(f"{field} {reason}", errors=[{"field": field, "message": reason}])
