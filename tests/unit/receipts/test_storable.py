"""What PostgreSQL can store: the check every request's values pass before anything is written."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from receipts import jsoncodec, storable
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



# -- the text of a body, before any walk ------------------------------------------------------------

ORDINARY_BODY = json.dumps({"format": "openai_chat", "message": {"role": "assistant", "tool_calls": [
    {"id": f"call_{n}", "type": "function", "function": {"name": "echo", "arguments": json.dumps({"n": n, "x": 2.5})}}
    for n in range(8)]}, "metadata": {"step": 1e99, "big": 10 ** 17}}).encode()


def test_an_ordinary_body_is_clean_from_its_text() -> None:
    assert storable.clean_text(ORDINARY_BODY)
    assert storable.clean_text(json.dumps(TYPICAL_CALL).encode())
    assert storable.clean_text("{\"text\": \"é 😀\"}".encode())  # characters beyond ASCII, written as they are


@pytest.mark.parametrize("text", [
    b'{"a": "x\\u0000y"}', b'{"a\\u0000": 1}', b'{"a": "\\ud800"}', b'{"a": "\\uDFFF"}',
    '{"a": "\ud800"}'.encode("utf-8", "surrogatepass"),  # json.loads reads a surrogate's UTF-8 from bytes
    b'{"n": NaN}', b'{"n": -Infinity}', b'{"n": 1e400}', b'{"n": 1E+308}', b'{"n": 2e308}',
    b'{"n": ' + b"9" * 400 + b'.0}', b'{"n": 0.' + b"1" * 30 + b'e300}',
    '{"a": "\\u0000"}'.encode("utf-16"), '{"n": NaN}'.encode("utf-32"),  # json.loads reads UTF-16 and UTF-32
    json.dumps({"arguments": json.dumps({"a": "\x00"})}).encode(),  # a JSON text inside a string, escaped
    json.dumps({"arguments": '{"n": NaN}'}).encode(),
])
def test_a_text_that_may_read_as_a_value_postgresql_cannot_store_is_not_clean(text: bytes) -> None:
    assert not storable.clean_text(text)


@settings(max_examples=400, deadline=None)
@given(value=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(alphabet=st.characters(codec=None)),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=12),
       ascii_only=st.booleans(), encoding=st.sampled_from(["utf-8", "utf-16", "utf-32"]))
def test_a_clean_text_never_reads_as_a_value_postgresql_cannot_store(value: Any, ascii_only: bool,
                                                                       encoding: str) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only).encode(encoding, "surrogatepass")
    if storable.clean_text(text):
        assert storable.fault(jsoncodec.loads(text)) is None
    if storable.fault(value) is not None:  # what json.dumps wrote of a faulty value reads faulty again
        assert not storable.clean_text(text)
