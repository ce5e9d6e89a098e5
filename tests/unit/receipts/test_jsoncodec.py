"""The store's JSON codec: orjson's speed, the standard library's values, whatever the document holds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from receipts.db import Database, Query, Steps, operation
from receipts.jsoncodec import compact, dumps, loads, long_digits
from receipts.store import calls
from tests.support.factories import TENANT, call

# Each must read back as json.loads reads PostgreSQL's text of it (jsonb keeps numbers as numerics:
# 1.2345678901234568e16 comes back as the integer 12345678901234568, with either codec).
DOCUMENTS: list[Any] = [
    {"n": 1, "f": 1.5, "neg": -0.25, "s": "é ☃ 𝄞", "l": [1, None, True, False], "o": {}},
    {"big": 123456789012345678901234567890, "neg_big": -(2**70)},  # orjson alone reads these as floats
    {"edge": 2**63 - 1, "edge_neg": -(2**63), "over": 2**64},
    {"digits": "12345678901234567890123", "n": 7},  # a long digit run inside a string
    [0.1, 1e-300, 1.7976931348623157e308, 12345678901234567.0],
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_loads_reads_what_json_reads(document: Any) -> None:
    text = json.dumps(document)
    assert loads(text.encode()) == json.loads(text)
    assert [type(v) for v in _leaves(loads(text.encode()))] == [type(v) for v in _leaves(json.loads(text))]
    assert loads(text) == json.loads(text)
    assert [type(v) for v in _leaves(loads(text))] == [type(v) for v in _leaves(json.loads(text))]


def test_loads_falls_back_where_orjson_refuses() -> None:
    assert loads(b'{"x": 1e400}') == {"x": float("inf")}  # jsonb holds such a number; json reads it as inf
    assert loads('{"x": 1}') == {"x": 1}  # text as well as bytes
    assert loads('{"x": NaN}')["x"] != loads('{"x": NaN}')["x"]  # json reads NaN (the store then refuses it)
    assert loads('{"s": "\\ud800"}') == {"s": "\ud800"}  # a lone surrogate, escaped
    assert loads('{"s": "\ud800"}') == {"s": "\ud800"}  # and as a character of the text


def test_a_run_of_19_digits_is_found_wherever_it_is() -> None:
    assert long_digits(b"[1234567890123456789]") and long_digits("x" * 1000 + "9" * 19)
    assert long_digits('{"s": "\ud800", "n": 10000000000000000000}')  # beside a lone surrogate
    assert not long_digits(b"[123456789012345678, 1.5e300, -999999999999999999]")
    assert not long_digits("\u0661" * 19)  # other scripts' digits: no JSON number is written in them


@pytest.mark.parametrize("text", ['{"a": }', '{"a": 1', "", "[1,]", '{"a": "\x01"}'])
def test_loads_refuses_what_json_refuses_with_its_error(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as got:
        loads(text)
    assert type(got.value) is type(expected.value) and str(got.value) == str(expected.value)


def test_dumps_writes_what_orjson_cannot() -> None:
    assert json.loads(dumps({"big": 2**70})) == {"big": 2**70}
    assert json.loads(dumps({1: "a"})) == {"1": "a"}  # a key that is no string, as json.dumps writes it


@pytest.mark.parametrize("document", DOCUMENTS)
def test_compact_bytes_are_what_starlette_renders(document: Any) -> None:
    body = compact(document)
    assert json.loads(body) == document
    assert body == json.dumps(document, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


@operation
def _as_text(receipt_id: str) -> Steps[str]:
    return (yield Query("SELECT input::text FROM receipts WHERE id = %(id)s", {"id": receipt_id}))[0]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_a_receipts_input_reads_back_as_the_standard_library_reads_it(db: Database, document: Any) -> None:
    receipt, _ = db.run(calls.create(call(arguments={"value": document})))
    stored = db.run(calls.get(TENANT, receipt.id)).input
    expected = json.loads(db.run(_as_text(receipt.id)))
    assert stored == expected
    assert [type(v) for v in _leaves(stored)] == [type(v) for v in _leaves(expected)]
    if not isinstance(document, list):  # no float of it that jsonb writes as an integer
        assert stored == {"value": document}


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in _leaves(value[key])]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]
