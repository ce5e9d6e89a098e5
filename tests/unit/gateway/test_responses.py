"""The gateway's JSON bodies: orjson's bytes where it can write them, the standard library's where not
(a lone surrogate neither can write: the store never holds one, receipts/storable.py)."""

from __future__ import annotations

import json

from starlette import responses

from gateway.responses import JSONResponse


def test_renders_the_same_bytes_as_starlette() -> None:
    content = {"id": "r_1", "output": {"text": "héllo ✓", "n": [1, 2.5, -3, None, True]}, "error": None,
               "nested": {"a": {"b": []}}, "big": 2**63 - 1}
    assert JSONResponse(content).body == responses.JSONResponse(content).body


def test_falls_back_for_integers_beyond_64_bits() -> None:
    content = {"huge": 2**70, "negative": -(2**70)}
    body = JSONResponse(content).body
    assert body == responses.JSONResponse(content).body
    assert json.loads(body) == content
