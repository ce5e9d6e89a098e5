"""Identifiers: a prefix and a ULID, so ids sort by creation time and say what they name.

A ULID is 48 bits of Unix milliseconds then 80 random bits, written as 26 characters of Crockford's
base32 (lower case here). Within one millisecond a process's next id is its last one plus one, so
the ids a process makes also sort in the order it made them (as python-ulid's default generator's
do); a forked child starts afresh, so it never repeats its parent's next id. The random part comes
from ``random`` (reseeded in every forked child), not the system's entropy: an id must be unique,
never secret (within a millisecond the next one is the last plus one anyway), and every new
millisecond's system call was the largest part of an id's cost.

Made here rather than by python-ulid's ``ULID()``, which builds and validates an object and encodes
it a character at a time: a twentieth of a batch's CPU. :func:`ulid_text` writes the same characters
two at a time from a table (tests/unit/receipts/test_ids.py compares both).
"""

from __future__ import annotations

import os
import random
import threading
import time

RANDOM_BITS = 80
_RANDOM_MAX = (1 << RANDOM_BITS) - 1
CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
_PAIRS = [first + second for first in CROCKFORD for second in CROCKFORD]  # every 10 bits' two characters
_SHIFTS = tuple(range(120, -1, -10))  # 130 bits, the top two zero, as 13 pairs

_HIGH_SHIFTS = tuple(shift - 30 for shift in _SHIFTS[:-3])  # the top 100 bits as 10 pairs
_lock = threading.Lock()
_last = (0, 0)  # the last id's milliseconds and random part, in this process
_high = (-1, "")  # the top 100 bits of the last id written, and their 20 characters


def _forget() -> None:
    global _last
    _last = (0, 0)


os.register_at_fork(after_in_child=_forget)


def next_ulid() -> int:
    """The next ULID of this process as a 128-bit integer, greater than every one it made before."""
    global _last
    now_ms = time.time_ns() // 1_000_000
    with _lock:
        last_ms, last_random = _last
        if now_ms > last_ms:
            _last = now_ms, random.getrandbits(RANDOM_BITS)
        elif last_random < _RANDOM_MAX:  # the same millisecond (or the clock stepped back): one more
            _last = last_ms, last_random + 1
        else:  # a millisecond's ids used up: the next millisecond's
            _last = last_ms + 1, random.getrandbits(RANDOM_BITS)
        ms, low = _last
    return ms << RANDOM_BITS | low


def ulid_text(value: int) -> str:
    """A 128-bit ULID as its 26 characters (base32 of 130 bits, the top two zero), in lower case.

    The ids a process makes one after another share their top 100 bits (the same millisecond, a
    random part one more): those characters are written once and kept for the next id.
    """
    global _high
    top, high = value >> 30, _high
    if high[0] != top:
        high = _high = top, "".join([_PAIRS[top >> shift & 1023] for shift in _HIGH_SHIFTS])
    return high[1] + _PAIRS[value >> 20 & 1023] + _PAIRS[value >> 10 & 1023] + _PAIRS[value & 1023]


def new_id(prefix: str) -> str:
    """A time-sortable unique id such as ``rcpt_01jd3v...``."""
    return f"{prefix}_{ulid_text(next_ulid())}"
