"""The ``@tool`` decorator: JSON Schema from the signature, the declared contract, argument binding."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

import pytest

from receipts.errors import InvalidInput
from workers import builtin
from workers.context import ToolContext
from workers.errors import InvalidArguments
from workers.registry import MARK, PythonTool, Registry, load_registry, tool

CONTEXT = ToolContext(receipt_id="rcpt_1", tenant_id="ten_1", trace_id="trace_1", attempt=1,
                      deadline_at=datetime(2030, 1, 1, tzinfo=UTC), timeout_s=5.0)


def registered(fn: Any) -> PythonTool:
    return getattr(fn, MARK)  # type: ignore[no-any-return]


@tool
def book(city: str, nights: int, budget: float, pets: bool = False, tags: list[str] | None = None,
         room: Literal["single", "double"] = "double") -> dict[str, Any]:
    """Book a hotel room.

    Longer explanation that is part of the description too.
    """
    return {"city": city, "nights": nights, "budget": budget, "pets": pets, "tags": tags, "room": room}


@tool(effect="write", idempotent=False, timeout_s=10, max_attempts=5, queue="slow", name="send_sms",
      description="Send a text message.")
async def send(to: str, text: str, ctx: ToolContext) -> dict[str, str]:
    return {"to": to, "receipt": ctx.receipt_id}


@tool
def anything(prefix: str, **rest: Any) -> dict[str, Any]:
    """Takes extra keyword arguments."""
    return {"prefix": prefix, **rest}


def test_schema_has_json_types_defaults_and_required_fields() -> None:
    schema = registered(book).spec.parameters
    assert schema["type"] == "object"
    props = schema["properties"]
    assert props["city"] == {"type": "string"}
    assert props["nights"] == {"type": "integer"}
    assert props["budget"] == {"type": "number"}
    assert props["pets"] == {"type": "boolean", "default": False}
    assert props["tags"]["default"] is None
    assert {"type": "array", "items": {"type": "string"}} in props["tags"]["anyOf"]
    assert props["room"] == {"type": "string", "enum": ["single", "double"], "default": "double"}
    assert sorted(schema["required"]) == ["budget", "city", "nights"]
    assert schema["additionalProperties"] is False
    assert "title" not in schema


def test_name_and_description_come_from_the_function() -> None:
    spec = registered(book).spec
    assert spec.name == "book"
    assert spec.kind == "python"
    assert spec.description.startswith("Book a hotel room.")
    assert "Longer explanation" in spec.description


def test_a_tool_that_declares_no_contract_is_a_non_idempotent_write() -> None:
    spec = registered(book).spec
    assert (spec.effect, spec.idempotent, spec.timeout_s, spec.max_attempts, spec.queue) == (
        "write", False, 30.0, 3, "tools")


def test_reads_are_idempotent_unless_declared() -> None:
    @tool(effect="read")
    def look(key: str) -> None:
        """Look."""

    @tool(effect="read", idempotent=False)
    def pop(key: str) -> None:
        """Read once."""

    assert (registered(look).spec.effect, registered(look).spec.idempotent) == ("read", True)
    assert (registered(pop).spec.effect, registered(pop).spec.idempotent) == ("read", False)


def test_declaring_only_idempotence_keeps_the_effect_a_write() -> None:
    @tool(idempotent=True)
    def put(key: str) -> None:
        """Put."""

    @tool(idempotent=False)
    def append(key: str) -> None:
        """Append."""

    assert (registered(put).spec.effect, registered(put).spec.idempotent) == ("write", True)
    assert (registered(append).spec.effect, registered(append).spec.idempotent) == ("write", False)


def test_declared_contract_is_kept_and_the_context_parameter_is_not_in_the_schema() -> None:
    item = registered(send)
    assert item.is_async
    spec = item.spec
    assert (spec.name, spec.description) == ("send_sms", "Send a text message.")
    assert (spec.effect, spec.idempotent, spec.timeout_s, spec.max_attempts, spec.queue) == (
        "write", False, 10.0, 5, "slow")
    assert set(spec.parameters["properties"]) == {"to", "text"}
    assert "ctx" not in spec.parameters.get("required", [])


def test_writes_are_not_idempotent_unless_declared() -> None:
    @tool(effect="write")
    def charge(amount: int) -> None:
        """Charge."""

    @tool(effect="write", idempotent=True)
    def upsert(key: str) -> None:
        """Upsert."""

    assert registered(charge).spec.idempotent is False
    assert registered(upsert).spec.idempotent is True


def test_var_keyword_arguments_allow_extra_properties() -> None:
    schema = registered(anything).spec.parameters
    assert schema["additionalProperties"] is True
    assert schema["required"] == ["prefix"]
    kwargs = registered(anything).arguments.bind({"prefix": "p", "a": 1, "b": [2]}, CONTEXT)
    assert kwargs == {"prefix": "p", "a": 1, "b": [2]}


def test_explicit_parameters_replace_the_generated_schema() -> None:
    schema = registered(builtin.echo).spec.parameters
    assert schema == {"type": "object", "additionalProperties": True}
    assert registered(builtin.echo).arguments.bind({"x": [1]}, CONTEXT) == {"x": [1]}


def test_bind_converts_validates_and_hands_over_the_context() -> None:
    kwargs = registered(send).arguments.bind({"to": "+33", "text": "hi"}, CONTEXT)
    assert kwargs == {"to": "+33", "text": "hi", "ctx": CONTEXT}
    booked = registered(book).arguments.bind({"city": "Oslo", "nights": "2", "budget": 90}, CONTEXT)
    assert booked["nights"] == 2 and booked["room"] == "double" and booked["tags"] is None


def test_bind_refuses_wrong_arguments_with_field_errors() -> None:
    with pytest.raises(InvalidArguments) as caught:
        registered(book).arguments.bind({"city": "Oslo", "nights": "many", "extra": 1}, CONTEXT)
    fields = {e["field"] for e in caught.value.details["errors"]}
    assert fields == {"nights", "budget", "extra"}


def test_positional_varargs_cannot_be_a_tool() -> None:
    with pytest.raises(TypeError):
        @tool
        def bad(*values: int) -> None:
            """Bad."""


def test_tool_names_must_be_valid_function_names() -> None:
    with pytest.raises(InvalidInput):
        @tool(name="Not-Valid")
        def bad() -> None:
            """Bad."""


def test_registry_loads_the_builtin_tools_and_named_modules() -> None:
    registry = load_registry(["tests.unit.workers.test_registry"])
    names = {spec.name for spec in registry.specs()}
    assert {"echo", "sleep", "calculate", "current_time", "book", "send_sms", "anything"} <= names
    assert registry.queues() == {"tools", "slow"}
    assert registry.get("book") is registered(book)
    assert registry.get("nope") is None
    assert Registry().specs() == []


def test_builtin_tool_contracts() -> None:
    registry = load_registry([])
    assert {spec.name: (spec.effect, spec.idempotent) for spec in registry.specs()} == {
        name: ("read", True) for name in ("echo", "sleep", "calculate", "current_time")}
    sleep = registry.get("sleep")
    assert sleep is not None
    assert sleep.spec.parameters["properties"]["seconds"] == {"type": "number"}
    assert sleep.spec.effect == "read" and sleep.spec.idempotent
    current_time = registry.get("current_time")
    assert current_time is not None
    assert current_time.spec.parameters["properties"]["timezone"] == {"type": "string", "default": "UTC"}
    assert current_time.spec.parameters.get("required", []) == []
