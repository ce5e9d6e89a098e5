"""The vendors' formats: calls read from each vendor's message, results written in each vendor's shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.calls import ToolCall, ToolResult
from agents.errors import MalformedMessage
from agents.formats import FORMATS
from tests.unit.agents import vendor_types

CHAT = FORMATS["openai_chat"]
RESPONSES = FORMATS["openai_responses"]
ANTHROPIC = FORMATS["anthropic"]


def chat_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def results_for(calls: list[ToolCall]) -> list[ToolResult]:
    return [ToolResult(call, f"result of {call.call_id}", i % 2 == 1) for i, call in enumerate(calls)]


# -- OpenAI Chat --------------------------------------------------------------------------------


def test_openai_chat_reads_every_function_call_in_order() -> None:
    message = {"role": "assistant", "content": None, "tool_calls": [
        chat_call("call_b", "echo", {"x": 1}), chat_call("call_a", "calculate", {"expression": "1+1"})]}
    calls = CHAT.calls(message)
    assert [(c.call_id, c.name, c.arguments, c.problem) for c in calls] == [
        ("call_b", "echo", {"x": 1}, None), ("call_a", "calculate", {"expression": "1+1"}, None)]


def test_openai_chat_arguments_that_are_not_a_json_object_are_the_models_mistake_not_an_envelope_error() -> None:
    calls = CHAT.calls({"role": "assistant", "tool_calls": [
        chat_call("c1", "echo", "{not json"), chat_call("c2", "echo", "[1, 2]"), chat_call("c3", "echo", "")]})
    assert calls[0].arguments is None and "not valid JSON" in (calls[0].problem or "")
    assert calls[1].arguments is None and "JSON object" in (calls[1].problem or "")
    assert calls[2].arguments == {} and calls[2].problem is None  # no arguments at all


@pytest.mark.parametrize(("arguments", "problem"), [
    ('{"a": {"b": "x\\u0000y"}}', "arguments.a.b contains a NUL"),
    ('{"n": [1, NaN]}', "arguments.n.1 must be a finite number"),
    ('{"n": 1e400}', "arguments.n must be a finite number"),
    ('{"a": "\\ud800"}', "arguments.a contains a lone surrogate"),
    ('{"a": "\ud800"}', "arguments.a contains a lone surrogate"),  # the character itself, not its escape
])
def test_openai_chat_arguments_postgresql_cannot_store_are_the_models_mistake(arguments: str, problem: str) -> None:
    (call,) = CHAT.calls({"role": "assistant", "tool_calls": [chat_call("c", "echo", arguments)]})
    assert call.arguments is None and problem in (call.problem or "")
    (clean,) = CHAT.calls({"role": "assistant", "tool_calls": [chat_call("c", "echo", '{"a": "\\u00e9 \u00e9 1e99"}')]})
    assert clean.arguments == {"a": "é é 1e99"} and clean.problem is None


def test_openai_chat_a_custom_tool_call_gets_an_answer_that_it_cannot_run() -> None:
    (call,) = CHAT.calls({"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "custom", "custom": {"name": "grammar", "input": "x"}}]})
    assert (call.call_id, call.name, call.arguments) == ("c1", "grammar", None)
    assert "only function tools" in (call.problem or "")


@pytest.mark.parametrize(("message", "field"), [
    ("not an object", "message"),
    ({"role": "assistant", "content": "Hello"}, "message.tool_calls"),
    ({"role": "assistant", "tool_calls": []}, "message.tool_calls"),
    ({"role": "user", "tool_calls": [chat_call("c", "echo", {})]}, "message.role"),
    ({"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "echo"}}]},
     "message.tool_calls.0.id"),
    ({"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"arguments": "{}"}}]},
     "message.tool_calls.0.function.name"),
    ({"role": "assistant", "tool_calls": [chat_call("c", "echo", {}), chat_call("c", "echo", {})]},
     "message.tool_calls.1.id"),
])
def test_openai_chat_a_malformed_envelope_names_the_field(message: Any, field: str) -> None:
    with pytest.raises(MalformedMessage) as raised:
        CHAT.calls(message)
    assert field in [error["field"] for error in raised.value.errors]


def test_openai_chat_writes_one_tool_message_per_call_that_the_sdk_accepts() -> None:
    calls = CHAT.calls({"role": "assistant", "tool_calls": [chat_call("c1", "a", {}), chat_call("c2", "b", {})]})
    messages = CHAT.messages(results_for(calls))
    assert [m["tool_call_id"] for m in messages] == ["c1", "c2"]
    assert [m["content"] for m in messages] == ["result of c1", "result of c2"]
    for message in messages:
        vendor_types.openai_chat_tool_message(message)


# -- OpenAI Responses ---------------------------------------------------------------------------


def response_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
            "arguments": json.dumps(arguments), "status": "completed"}


def test_openai_responses_reads_function_calls_and_ignores_every_other_item() -> None:
    output = [{"type": "reasoning", "id": "rs_1", "summary": []},
              response_call("call_1", "echo", {"a": 1}),
              {"type": "message", "id": "msg_1", "role": "assistant",
               "content": [{"type": "output_text", "text": "x"}]},
              response_call("call_2", "sleep", {"seconds": 0})]
    assert [(c.call_id, c.name) for c in RESPONSES.calls(output)] == [("call_1", "echo"), ("call_2", "sleep")]
    assert [c.call_id for c in RESPONSES.calls({"id": "resp_1", "output": output})] == ["call_1", "call_2"]


@pytest.mark.parametrize(("message", "field"), [
    ({"role": "assistant"}, "message"),
    ([{"type": "message", "role": "assistant", "content": []}], "message"),
    ([{"type": "function_call", "name": "echo", "arguments": "{}"}], "message.0.call_id"),
    ([response_call("c", "echo", {}), response_call("c", "echo", {})], "message.1.call_id"),
])
def test_openai_responses_a_malformed_envelope_names_the_field(message: Any, field: str) -> None:
    with pytest.raises(MalformedMessage) as raised:
        RESPONSES.calls(message)
    assert field in [error["field"] for error in raised.value.errors]


def test_openai_responses_writes_function_call_outputs_that_the_sdk_accepts() -> None:
    calls = RESPONSES.calls([response_call("call_1", "a", {}), response_call("call_2", "b", {})])
    items = RESPONSES.messages(results_for(calls))
    assert [(i["type"], i["call_id"], i["output"]) for i in items] == [
        ("function_call_output", "call_1", "result of call_1"), ("function_call_output", "call_2", "result of call_2")]
    for item in items:
        vendor_types.openai_responses_output(item)


# -- Anthropic ----------------------------------------------------------------------------------


def tool_use(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def test_anthropic_reads_tool_use_blocks_and_ignores_text() -> None:
    message = {"role": "assistant", "content": [{"type": "text", "text": "Let me look."},
                                                tool_use("toolu_1", "echo", {"x": 1}),
                                                tool_use("toolu_2", "calculate", {"expression": "2*2"})]}
    calls = ANTHROPIC.calls(message)
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        ("toolu_1", "echo", {"x": 1}), ("toolu_2", "calculate", {"expression": "2*2"})]


def test_anthropic_an_input_that_is_not_an_object_is_the_models_mistake() -> None:
    (call,) = ANTHROPIC.calls({"role": "assistant", "content": [tool_use("toolu_1", "echo", [1])]})
    assert call.arguments is None and "JSON object" in (call.problem or "")


@pytest.mark.parametrize(("message", "field"), [
    ([tool_use("t", "echo", {})], "message"),
    ({"role": "assistant", "content": "just text"}, "message.content"),
    ({"role": "assistant", "content": [{"type": "text", "text": "no calls"}]}, "message.content"),
    ({"role": "assistant", "content": [{"type": "tool_use", "name": "echo", "input": {}}]}, "message.content.0.id"),
    ({"role": "assistant", "content": [tool_use("t", "echo", {}), tool_use("t", "echo", {})]}, "message.content.1.id"),
])
def test_anthropic_a_malformed_envelope_names_the_field(message: Any, field: str) -> None:
    with pytest.raises(MalformedMessage) as raised:
        ANTHROPIC.calls(message)
    assert field in [error["field"] for error in raised.value.errors]


def test_anthropic_writes_one_user_message_with_every_tool_result_first_and_in_order() -> None:
    calls = ANTHROPIC.calls({"role": "assistant", "content": [tool_use("t1", "a", {}), tool_use("t2", "b", {}),
                                                              tool_use("t3", "c", {})]})
    (message,) = ANTHROPIC.messages(results_for(calls))
    assert message["role"] == "user"
    assert [(b["type"], b["tool_use_id"], b["is_error"]) for b in message["content"]] == [
        ("tool_result", "t1", False), ("tool_result", "t2", True), ("tool_result", "t3", False)]
    vendor_types.anthropic_user_message(message)


def test_the_vendor_checks_refuse_what_the_vendors_would() -> None:
    """The checks these tests rely on fail for a message a vendor's SDK does not accept."""
    with pytest.raises(AssertionError):
        vendor_types.openai_chat_tool_message({"role": "tool", "tool_call_id": "c", "content": "x", "receipt": "r"})
    with pytest.raises(Exception):  # noqa: B017 - pydantic's ValidationError or the key check
        vendor_types.anthropic_user_message({"role": "user", "content": [{"type": "tool_result", "content": "x"}]})
    with pytest.raises(Exception):  # noqa: B017
        vendor_types.openai_responses_output({"type": "function_call_output", "call_id": "c"})
