"""The vendors' own SDK types, to check that every message toolrelay writes is one their clients accept."""

from __future__ import annotations

from typing import Any, Required, get_origin

from anthropic.types import MessageParam, ToolResultBlockParam
from anthropic.types.user_message_param import UserMessageParam
from openai.types.chat import ChatCompletionToolMessageParam
from openai.types.responses.response_input_param import FunctionCallOutput, ResponseInputItemParam
from pydantic import TypeAdapter
from typing_extensions import get_type_hints


def _keys_known(value: dict[str, Any], typed: Any) -> None:
    """The TypedDict checks pydantic leaves out: no key the vendor's type does not define, and every key
    it marks ``Required`` (the SDKs' string annotations hide those marks from ``__required_keys__``)."""
    hints = get_type_hints(typed, include_extras=True)
    required = {name for name, hint in hints.items() if get_origin(hint) is Required}
    assert set(value) <= set(hints), f"{set(value) - set(hints)} are not fields of {typed.__name__}"
    assert required <= set(value), f"{typed.__name__} needs {required - set(value)}"


def openai_chat_tool_message(message: dict[str, Any]) -> None:
    TypeAdapter(ChatCompletionToolMessageParam).validate_python(message)
    _keys_known(message, ChatCompletionToolMessageParam)


def openai_responses_output(item: dict[str, Any]) -> None:
    TypeAdapter(ResponseInputItemParam).validate_python(item)
    _keys_known(item, FunctionCallOutput)


def anthropic_user_message(message: dict[str, Any]) -> None:
    # MessageParam validates its content lazily (an iterator); each block is checked as a tool result below.
    TypeAdapter(MessageParam).validate_python(message)
    _keys_known(message, UserMessageParam)
    assert isinstance(message["content"], list) and message["content"], "a list of content blocks"
    for block in message["content"]:
        TypeAdapter(ToolResultBlockParam).validate_python(block)
        _keys_known(block, ToolResultBlockParam)
