"""JSON by orjson, with the standard library wherever orjson would differ: the store's, the API's
response bodies and the webhooks' bodies.

psycopg encodes and decodes ``json``/``jsonb`` with the standard library's ``json`` unless told
otherwise; every call's arguments, metadata, output and error go through it, on every write and
every read. orjson does the same work in a fraction of the time, but it is not a drop-in: it reads
an integer beyond 64 bits as a float (silently: ``123456789012345678901234567890`` would come back
rounded), refuses a number beyond a double's range and a string with a lone surrogate, and writes
neither integers beyond 64 bits nor objects with keys that are not strings. So:

* :func:`loads` hands a document holding a run of 19 or more digits (a number orjson might read
  wrong, or merely a long digit string) to ``json.loads``, and any document orjson refuses too;
* :func:`dumps` hands any value orjson refuses to ``json.dumps``;
* :func:`compact` writes the bytes of a response or webhook body (compact, characters as they are):
  orjson's, or for what orjson refuses Starlette's own rendering of a ``JSONResponse``.

Every other document decodes to equal values either way. What is stored is checked first
(:mod:`receipts.storable`): no NaN or infinity, which orjson would write as ``null``. (orjson also
writes what ``json.dumps`` refuses, a datetime or a UUID; the store is handed JSON values only.)

:data:`ADAPTERS` is the adapter map the store's connections are opened with (``context=``): psycopg's
defaults with these two functions for ``json`` and ``jsonb``, so no other psycopg user in the process
is affected.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import psycopg
from psycopg.adapt import AdaptersMap
from psycopg.types.json import set_json_dumps, set_json_loads

LONG_RUN = b"0" * 19  # 2**63 has 19 digits: shorter integers are read exactly by orjson
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")


def long_digits(data: bytes | str) -> bool:
    """Whether ``data`` holds a run of 19 or more ASCII digits (JSON's numbers are written in no others):
    with every digit made a zero, a search for 19 zeros, ten times faster than a regular expression."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return LONG_RUN in raw.translate(_DIGITS_TO_ZERO)


def loads(data: bytes | str) -> Any:
    """``json.loads(data)``, in orjson's time where that gives the same value; what orjson refuses
    (``NaN``, a lone surrogate, a syntax error) ``json.loads`` reads, or refuses with its own error."""
    if not long_digits(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def dumps(value: Any) -> bytes | str:
    """JSON text for ``value``: orjson's, or ``json.dumps``'s for what orjson refuses."""
    try:
        return orjson.dumps(value)
    except TypeError:  # an integer beyond 64 bits, a key that is not a string, a lone surrogate
        return json.dumps(value)


def compact(value: Any) -> bytes:
    """Compact JSON for ``value`` with its characters as they are (no ``\\u`` escapes), as UTF-8: the bytes
    Starlette's ``JSONResponse`` renders, in orjson's time where orjson writes them."""
    try:
        return orjson.dumps(value)
    except TypeError:  # an integer beyond 64 bits, a key that is not a string, a lone surrogate
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


ADAPTERS = AdaptersMap(psycopg.adapters)
set_json_dumps(dumps, ADAPTERS)
set_json_loads(loads, ADAPTERS)
