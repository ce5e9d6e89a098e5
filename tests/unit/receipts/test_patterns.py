"""Schema patterns run on RE2: a pattern that backtracks for ever under ``re`` answers at once.

These also pin the jsonschema internals receipts/patterns.py replaces: the ``re`` of its keyword
modules. If jsonschema moves its matching elsewhere, the attribute checks fail, and the catastrophic
cases below hang under ``re`` until their timeout fails them.
"""

from __future__ import annotations

from typing import Any

import jsonschema._keywords
import jsonschema._utils
import pytest
from jsonschema.exceptions import SchemaError

from receipts import patterns

BACKTRACKS = "^(a+)+$"  # under re, 2^n steps for n a's that end in a mismatch
MALICIOUS = "a" * 5000 + "!"


def messages(schema: dict[str, Any], instance: Any) -> list[str]:
    return [error.message for error in patterns.validator(schema).iter_errors(instance)]


def test_jsonschema_matches_through_the_re2_search() -> None:
    patterns.validator({})
    assert jsonschema._keywords.re is patterns.SAFE_RE  # type: ignore[attr-defined]
    assert jsonschema._utils.re is patterns.SAFE_RE  # type: ignore[attr-defined]
    assert patterns.SAFE_RE.compile is __import__("re").compile  # the rest of re is left as it is


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("schema", "instance"), [
    ({"type": "string", "pattern": BACKTRACKS}, MALICIOUS),
    ({"type": "object", "patternProperties": {BACKTRACKS: {"type": "integer"}}}, {MALICIOUS: "x"}),
    ({"type": "object", "patternProperties": {BACKTRACKS: {}}, "additionalProperties": False}, {MALICIOUS: 1}),
    ({"type": "object", "patternProperties": {BACKTRACKS: {}}, "unevaluatedProperties": False}, {MALICIOUS: 1}),
    ({"type": "object", "propertyNames": {"pattern": BACKTRACKS}}, {MALICIOUS: 1}),
])
def test_a_backtracking_pattern_is_answered_at_once(schema: dict[str, Any], instance: Any) -> None:
    found = messages(schema, instance)
    if "patternProperties" in schema and len(schema) == 2:
        assert found == []  # the key does not match the pattern: its subschema does not apply
    else:
        assert len(found) == 1


def test_patterns_keep_their_meaning() -> None:
    schema = {"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"}},
              "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False}
    assert messages(schema, {"sku": "ABC-1234", "x-count": 3}) == []
    assert messages(schema, {"sku": "abc-1234"}) == ["'abc-1234' does not match '^[A-Z]{3}-\\\\d{4}$'"]
    assert messages(schema, {"x-count": "three"}) == ["'three' is not of type 'integer'"]
    assert len(messages(schema, {"other": 1})) == 1  # neither listed nor matching a pattern


@pytest.mark.parametrize(("schema", "path"), [
    ({"type": "string", "pattern": "^(?=.*\\d).{8,}$"}, ["pattern"]),  # lookahead
    ({"type": "object", "patternProperties": {"^(a)\\1$": {}}}, ["patternProperties"]),  # a backreference
    ({"type": "object", "properties": {"code": {"type": "string", "pattern": "a{2000}"}}},
     ["properties", "code", "pattern"]),  # RE2 repeats at most 1000 times
])
def test_a_pattern_re2_cannot_run_is_refused_with_the_reason(schema: dict[str, Any], path: list[str]) -> None:
    with pytest.raises(SchemaError) as refused:
        patterns.check_schema(schema)
    assert list(refused.value.absolute_path) == path
    assert isinstance(refused.value.cause, patterns.UnsupportedPattern)
    assert "RE2" in str(refused.value.cause)


def test_a_schema_re2_can_run_passes_the_check() -> None:
    patterns.check_schema({"type": "object", "properties": {"name": {"type": "string", "pattern": "^[\\p{L} ]+$"}},
                           "patternProperties": {"^meta_": {"type": "string"}}})
    with pytest.raises(SchemaError):  # and the meta-schema is still checked
        patterns.check_schema({"type": "object", "properties": {"name": {"type": 7}}})


def test_an_unrunnable_pattern_already_stored_matches_nothing() -> None:
    # An MCP server's schema is not checked like a tenant's definition: its lookahead fails the call.
    assert messages({"type": "string", "pattern": "^(?=a)"}, "abc") == ["'abc' does not match '^(?=a)'"]
