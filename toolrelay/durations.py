"""Durations as an operator types them on the command line: ``30d``, ``12h``, ``90m``, ``45s``, ``2w``."""

from __future__ import annotations

import re

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(text: str) -> float:
    """Seconds in ``text``: a number and a unit (s, m, h, d or w; none means seconds).

    Raises:
        ValueError: ``text`` is not such a duration.
    """
    match = DURATION.match(text.lower())
    if match is None:
        raise ValueError(f"{text!r} is not a duration such as 30d, 12h, 90m or 45s")
    return float(match[1]) * UNITS[match[2] or "s"]
