"""What PostgreSQL can store: the check every request's values pass before anything is written."""

from __future__ import annotations

import json
from typing import Any

import pytest

from receipts import storable
from receipts.errors import InvalidInput

TYPICAL_CALL = {"tool": "calculate", "arguments": {"expression": "(2 + 3) * 4"}, "trace_id": "trace_demo",
                "metadata": {"step": 1, "run_id": "run_01m8rmzw5gmj2m5eqsxx4gf643"}}


@pytest.mark.parametrize(("value", "path", "reason"), [
    ({"a": "x\x00y"}, ("a",), "NUL"),
    ({"a": {"b\x00": 1}}, ("a", "b\x00"), "is a key that contains a NUL"),
    ({"a": ["ok", "\ud800"]}, ("a", 1), "lone surrogate"),
    ({"a": [{"\udfff": 1}]}, ("a", 0, "\udfff"), "is a key that contains a lone surrogate"),
    ({"n": float("nan")}, ("n",), "finite"),
    ({"n": [float("inf")]}, ("n", 0), "finite"),
    ({"n": json.loads("-Infinity")}, ("n",), "finite"),
    ({"n": json.loads("1e400")}, ("n",), "finite"),
    ("\x00", (), "NUL"),
])
def test_a_value_postgresql_cannot_store_is_found_with_its_path(value: Any, path: tuple[Any, ...], reason: str) -> None:
    found = storable.fault(value)
    assert found is not None
    assert found[0] == path
    assert reason in found[1]


@pytest.mark.parametrize("value", [
    TYPICAL_CALL,
    {"emoji": "😀 é ß", "pair": json.loads('"\\ud83d\\ude00"'), "big": 10 ** 40, "float": 1e308, "none": None,
     "flag": True, "nested": [[[{"k": [1, 2.5, "three"]}]]], "escaped": "\\u0000 is just text here"},
    [], {}, "", 0, -0.0,
])
def test_values_postgresql_stores_pass(value: Any) -> None:
    assert storable.fault(value) is None
    storable.check(value)


def test_other_containers_are_walked_as_well() -> None:
    assert storable.fault(("a", {"b": ("\x00",)})) == ((1, "b", 0), storable.NUL_MESSAGE)


def test_the_error_names_the_field_escaped_so_that_it_can_be_shown() -> None:
    with pytest.raises(InvalidInput) as info:
        storable.check({"items": [{"na\x00me": 1}, {"\ud800": "x"}]}, field="arguments")
    assert info.value.errors == [{"field": "arguments.items.1.\\ud800",
                                  "message": f"is a key that {storable.SURROGATE_MESSAGE}"}]
    json.dumps(info.value.errors, ensure_ascii=False).encode()  # shown as it is: no surrogate left in it
    with pytest.raises(InvalidInput) as info:
        storable.check({"k\x00": 1})
    assert info.value.errors[0]["field"] == "k\\u0000"
    with pytest.raises(InvalidInput) as info:
        storable.check(float("nan"))
    assert info.value.errors[0]["field"] == "body"


def test_named_texts_are_checked_and_other_values_left_alone() -> None:
    storable.check_texts({"receipt_id": "rcpt_1", "limit": 5})
    with pytest.raises(InvalidInput) as info:
        storable.check_texts([("trace_id", "ok"), ("tool", "ec\x00ho")])
    assert info.value.errors == [{"field": "tool", "message": storable.NUL_MESSAGE}]


def test_a_deep_value_costs_no_recursion() -> None:
    deep: list[Any] = []
    inner = deep
    for _ in range(100_000):
        inner.append([])
        inner = inner[0]
    assert storable.fault(deep) is None
    inner.append("\x00")
    found = storable.fault(deep)
    assert found is not None and len(found[0]) == 100_001

