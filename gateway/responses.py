"""Starlette's ``JSONResponse``, rendered by orjson: the same compact bytes, a few times faster.

orjson refuses what JSON (and PostgreSQL's jsonb) can hold but it cannot write: integers beyond 64
bits, and strings holding a lone surrogate; those bodies are rendered as before, by the standard library.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette import responses


class JSONResponse(responses.JSONResponse):
    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content)
        except (orjson.JSONEncodeError, TypeError):
            return super().render(content)
