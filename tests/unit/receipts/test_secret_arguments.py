"""Secrets in arguments: where a schema puts them, masking, merging back, and errors that do not repeat them."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

from receipts.records import ToolSpec
from receipts.secret_arguments import MASK, SecretFields, reveal, scrub
from receipts.submission import CheckedTool

SECRET = {"type": "string", "writeOnly": True}
PASSWORD = {"type": "string", "format": "password"}

NESTED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "user": {"type": "string"},
        "password": PASSWORD,
        "account": {"type": "object", "properties": {"token": SECRET, "region": {"type": "string"}}},
        "cards": {"type": "array", "items": {"$ref": "#/$defs/Card"}},
        "pin": {"anyOf": [SECRET, {"type": "null"}]},
        "pair": {"type": "array", "prefixItems": [{"type": "string"}, SECRET]},
        "headers": {"type": "object", "additionalProperties": SECRET},
    },
    "$defs": {"Card": {"type": "object", "properties": {"number": {**SECRET, "minLength": 12},
                                                        "holder": {"type": "string"}}}},
}
ARGUMENTS: dict[str, Any] = {
    "user": "ada",
    "password": "hunter2-hunter2",
    "account": {"token": "tok-123456", "region": "eu"},
    "cards": [{"number": "4242424242424242", "holder": "Ada"}, {"number": "5555555555554444", "holder": "Bob"}],
    "pin": None,
    "pair": ["label", "pair-secret"],
    "headers": {"X-Api-Key": "hdr-secret"},
}


def test_a_schema_without_secrets_has_no_secret_fields() -> None:
    assert SecretFields.of({"type": "object", "properties": {"a": {"type": "string"}}}) is None


def test_secrets_are_masked_at_any_depth_and_merged_back_exactly() -> None:
    fields = SecretFields.of(NESTED)
    assert fields is not None
    split = fields.split(ARGUMENTS)
    assert split.masked == {
        "user": "ada",
        "password": MASK,
        "account": {"token": MASK, "region": "eu"},
        "cards": [{"number": MASK, "holder": "Ada"}, {"number": MASK, "holder": "Bob"}],
        "pin": None,  # an optional secret left out is not a secret
        "pair": ["label", MASK],
        "headers": {"X-Api-Key": MASK},
    }
    assert [path for path, _ in split.secrets] == [
        ("password",), ("account", "token"), ("cards", 0, "number"), ("cards", 1, "number"), ("pair", 1),
        ("headers", "X-Api-Key")]
    assert reveal(split.masked, split.secrets) == ARGUMENTS
    assert split.masked["password"] == MASK  # revealing copies: the masked arguments stay masked


def test_revealing_secrets_stored_as_json_lists() -> None:
    fields = SecretFields.of(NESTED)
    assert fields is not None
    split = fields.split(ARGUMENTS)
    stored = [[list(path), value] for path, value in split.secrets]  # as secret_input holds them
    assert reveal(split.masked, stored) == ARGUMENTS


def test_a_pydantic_secret_str_schema_is_a_secret() -> None:
    from pydantic import BaseModel, SecretStr

    class Login(BaseModel):
        user: str
        password: SecretStr

    fields = SecretFields.of(Login.model_json_schema())
    assert fields is not None
    assert fields.mask({"user": "ada", "password": "pw-secret"}) == {"user": "ada", "password": MASK}


def test_a_self_referencing_schema_is_walked_as_deep_as_the_value() -> None:
    tree = {"$ref": "#/$defs/Node", "$defs": {"Node": {"type": "object", "properties": {
        "key": SECRET, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}}
    fields = SecretFields.of(tree)
    assert fields is not None
    value = {"key": "k1-secret", "children": [{"key": "k2-secret", "children": [{"key": "k3-secret"}]}]}
    assert fields.mask(value) == {"key": MASK, "children": [{"key": MASK, "children": [{"key": MASK}]}]}


def test_schema_errors_never_repeat_a_secret() -> None:
    checked = CheckedTool.of(ToolSpec(name="pay", kind="python", description="", parameters={
        **NESTED, "required": ["user"], "properties": {**NESTED["properties"], "user": {"type": "string"}},
        "anyOf": [{"required": ["user"]}, {"properties": {"user": {"const": "nobody"}}}]}))
    arguments = {**ARGUMENTS, "cards": [{"number": "4242-short", "holder": "Ada"}], "password": 123456789}
    raw = [err.message for err in Draft202012Validator(checked.spec.parameters).iter_errors(arguments)]
    assert any("4242-short" in message for message in raw)  # what jsonschema itself would say
    errors = checked.errors(arguments)
    assert {err["field"] for err in errors} >= {"arguments.cards.0.number", "arguments.password"}
    text = repr(errors)
    assert "4242-short" not in text and "123456789" not in text
    assert all("secret" in err["message"] for err in errors if err["field"] in
               ("arguments.cards.0.number", "arguments.password"))


def test_an_error_elsewhere_that_quotes_the_whole_object_is_reworded() -> None:
    schema = {"type": "object", "properties": {"password": SECRET}, "not": {"required": ["password"]}}
    checked = CheckedTool.of(ToolSpec(name="t", kind="python", description="", parameters=schema))
    assert "quoted-secret" in next(Draft202012Validator(schema).iter_errors({"password": "quoted-secret"})).message
    errors = checked.errors({"password": "quoted-secret"})
    assert len(errors) == 1 and errors[0]["field"] == "arguments"
    assert "quoted-secret" not in errors[0]["message"]


def test_scrub_masks_a_secret_the_tool_repeats() -> None:
    secrets = [(("password",), "hunter2-hunter2"), (("pin",), "12")]
    output = {"echo": "hunter2-hunter2", "log": "logged in with hunter2-hunter2 as ada", "pin": "12", "n": "123",
              "list": ["hunter2-hunter2"]}
    assert scrub(output, secrets) == {"echo": MASK, "log": f"logged in with {MASK} as ada", "pin": MASK,
                                      "n": "123", "list": [MASK]}
    assert scrub({"a": 1}, []) == {"a": 1}
