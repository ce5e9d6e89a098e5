"""``/mcp`` with the ``mcp`` package's own client, against a real gateway, worker and beat over HTTP."""

from __future__ import annotations

import time
import uuid
from typing import Any, cast

import anyio
import httpx
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from receipts.tenants import create_key
from tests.integration.mcp.conftest import connect, get_receipt, receipts_of
from tests.support.mcp_fixtures import ERROR_TEXT
from tests.support.stack import Stack

RECEIPT_ID = "toolrelay/receipt_id"
TRACE_ID = "toolrelay/trace_id"
CALL_ID = "toolrelay/call_id"
# The calls these tests cancel sleep for SLEEP_S: a cancel does not stop a running attempt (its result
# is discarded), so each holds one of the worker's two slots that long.
SLEEP_S = 10


def trace() -> str:
    return f"trace_mcp_{uuid.uuid4().hex[:12]}"


def meta_of(values: dict[str, Any] | None) -> types.RequestParamsMeta | None:
    """``_meta`` for a request: toolrelay's keys are extra items of the SDK's TypedDict."""
    return cast(types.RequestParamsMeta, values)


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def call(stack: Stack, tool: str, arguments: dict[str, Any] | None = None, *, key: str | None = None,
         meta: dict[str, Any] | None = None) -> types.CallToolResult:
    async def scenario() -> types.CallToolResult:
        async with connect(stack, key) as session:
            return await session.call_tool(tool, arguments or {}, meta=meta_of(meta))

    return anyio.run(scenario)


def tool_names(stack: Stack, key: str | None = None) -> dict[str, types.Tool]:
    async def scenario() -> list[types.Tool]:
        async with connect(stack, key) as session:
            return (await session.list_tools()).tools

    return {tool.name: tool for tool in anyio.run(scenario)}


def test_tools_list_is_the_catalogue_with_its_contract_as_annotations(stack: Stack) -> None:
    tools = tool_names(stack)
    assert {"echo", "calculate", "sleep", "boom", "slow_write", "flaky", "test_simple_text"} <= set(tools)
    with stack.client() as client:
        stored = client.get("/v1/tools/slow_write").json()
    assert tools["slow_write"].input_schema == stored["parameters"]
    assert tools["slow_write"].description == stored["description"]

    def hints(name: str) -> tuple[bool | None, bool | None, bool | None]:
        annotations = tools[name].annotations
        assert annotations is not None
        return annotations.read_only_hint, annotations.idempotent_hint, annotations.destructive_hint

    assert hints("echo") == (True, True, None)  # a read
    assert hints("slow_write") == (False, False, True)  # a write that is not idempotent: destructive
    assert hints("flaky") == (False, True, None)  # an idempotent write: the contract says no more


def test_echo_answers_its_output_as_text_and_structured_content(stack: Stack) -> None:
    result = call(stack, "echo", {"x": 1, "word": "été"})
    assert not result.is_error
    assert text_of(result) == '{"x": 1, "word": "été"}'
    assert result.structured_content == {"x": 1, "word": "été"}
    assert result.meta is not None and result.meta[RECEIPT_ID].startswith("rcpt_")


def test_outputs_that_are_not_json_objects_are_text_only(stack: Stack) -> None:
    calculated = call(stack, "calculate", {"expression": "2 ** 10"})
    assert text_of(calculated) == '{"result": 1024}'
    assert calculated.structured_content == {"result": 1024}
    number = call(stack, "add_numbers", {"a": 1.5, "b": 2})
    assert not number.is_error
    assert text_of(number) == "3.5"
    assert number.structured_content is None
    text = call(stack, "test_simple_text")
    assert text_of(text) == "This is a simple text response for testing."  # a string as is, not JSON
    assert text.structured_content is None


def test_a_failed_receipt_is_a_tool_error_with_its_code_and_message(stack: Stack) -> None:
    result = call(stack, "boom", {"message": "the disk is full"})
    assert result.is_error
    assert text_of(result) == "error: tool_error: the disk is full"
    assert result.meta is not None
    receipt = get_receipt(stack, result.meta[RECEIPT_ID]).json()
    assert receipt["status"] == "failed"
    assert receipt["error"]["code"] == "tool_error"
    assert text_of(call(stack, "test_error_handling")) == f"error: tool_error: {ERROR_TEXT}"


def test_an_unknown_tool_is_a_tool_error_naming_the_tools_it_may_use(stack: Stack) -> None:
    result = call(stack, "send_rocket", {"to": "moon"})
    assert result.is_error
    text = text_of(result)
    assert text.startswith("error: not_found: no tool named 'send_rocket'; the tools you may use are: ")
    assert "echo" in text and "calculate" in text
    with stack.client() as client:
        assert client.get("/v1/receipts", params={"tool": "send_rocket"}).json()["data"] == []


def test_bad_arguments_are_a_tool_error_by_field_and_store_nothing(stack: Stack) -> None:
    trace_id = trace()
    result = call(stack, "sleep", {"seconds": "long", "extra": 1}, meta={TRACE_ID: trace_id})
    assert result.is_error
    text = text_of(result)
    assert text.startswith("error: invalid_arguments: arguments do not match the schema of 'sleep': ")
    assert "arguments.seconds: 'long' is not of type 'number'" in text
    assert result.meta is None  # no receipt: nothing was stored
    assert receipts_of(stack, trace_id) == []
    bad_meta = call(stack, "echo", {}, meta={TRACE_ID: 42})
    assert bad_meta.is_error
    assert "_meta.toolrelay/trace_id: must be a string of 1 to 200 characters" in text_of(bad_meta)


def test_trace_and_call_ids_from_meta_are_the_receipts(stack: Stack) -> None:
    trace_id = trace()
    result = call(stack, "echo", {"n": 7}, meta={TRACE_ID: trace_id, CALL_ID: "toolu_01"})
    assert result.meta is not None
    assert result.meta[TRACE_ID] == trace_id
    response = get_receipt(stack, result.meta[RECEIPT_ID])
    assert response.status_code == 200
    receipt = response.json()
    assert receipt["trace_id"] == trace_id
    assert receipt["call_id"] == "toolu_01"
    assert receipt["status"] == "success"
    assert receipt["output"] == result.structured_content == {"n": 7}
    assert [r["id"] for r in receipts_of(stack, trace_id)] == [receipt["id"]]


def test_progress_follows_the_receipt_through_each_attempt(stack: Stack) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async def scenario() -> types.CallToolResult:
        async with connect(stack) as session:
            return await session.call_tool("flaky", {"tag": f"mcp{uuid.uuid4().hex[:8]}", "failures": 1},
                                           progress_callback=on_progress)

    result = anyio.run(scenario)
    assert not result.is_error, text_of(result)
    assert result.structured_content == {"calls": 2}
    assert result.meta is not None
    receipt_id = result.meta[RECEIPT_ID]
    assert [(progress, total) for progress, total, _ in seen] == [(0, 4), (1, 4), (2, 4), (4, 4)]
    assert [message for _, _, message in seen] == [f"accepted: {receipt_id} is pending", "running: attempt 1 of 3",
                                                   "running: attempt 2 of 3", "finished: success"]


def test_a_cancelled_call_cancels_its_receipt(stack: Stack) -> None:
    trace_id = trace()

    async def scenario() -> dict[str, Any]:
        async with connect(stack) as session:
            running = anyio.Event()

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                if progress >= 1:
                    running.set()

            async with anyio.create_task_group() as group:
                group.start_soon(lambda: session.call_tool("sleep", {"seconds": SLEEP_S}, progress_callback=on_progress,
                                                           meta=meta_of({TRACE_ID: trace_id})))
                with anyio.fail_after(30):
                    await running.wait()
                group.cancel_scope.cancel()  # the client sends notifications/cancelled for the call
            # Still in the session: it is the cancellation that cancels the receipt, not the session ending.
            (receipt,) = await anyio.to_thread.run_sync(receipts_of, stack, trace_id)
            return await anyio.to_thread.run_sync(lambda: stack.wait_terminal(receipt["id"], timeout=15))

    receipt = anyio.run(scenario)
    assert receipt["status"] == "canceled"
    with stack.client() as client:
        events = client.get(f"/v1/receipts/{receipt['id']}/events").json()["data"]
    assert [(e["to_status"], e["actor"]) for e in events][-1] == ("canceled", "mcp")


def test_another_tenant_sees_only_its_own_tools_and_receipts(stack: Stack) -> None:
    with stack.client() as client:
        defined = client.post("/v1/tools", json={"kind": "function", "name": "mcp_private_approval",
                                                 "description": "Ask a person.",
                                                 "parameters": {"type": "object", "properties": {}}})
        assert defined.status_code == 201, defined.text
    assert "mcp_private_approval" in tool_names(stack)
    theirs = tool_names(stack, stack.other_key)
    assert "mcp_private_approval" not in theirs
    assert "echo" in theirs  # the global tools are everybody's

    mine = call(stack, "echo", {"secret": "ours"})
    assert mine.meta is not None
    assert get_receipt(stack, mine.meta[RECEIPT_ID], stack.other_key).status_code == 404
    refused = call(stack, "mcp_private_approval", key=stack.other_key)
    assert refused.is_error
    assert text_of(refused).startswith("error: not_found: no tool named 'mcp_private_approval'")
    own = call(stack, "echo", {"secret": "theirs"}, key=stack.other_key)
    assert own.meta is not None
    assert get_receipt(stack, own.meta[RECEIPT_ID], stack.other_key).json()["output"] == {"secret": "theirs"}
    assert get_receipt(stack, own.meta[RECEIPT_ID]).status_code == 404


def test_a_key_limited_to_some_tools_lists_and_calls_only_those(stack: Stack) -> None:
    scoped = stack.db.run(create_key("tests", tools=["echo"]))
    assert set(tool_names(stack, scoped)) == {"echo"}
    trace = f"trace_{uuid.uuid4().hex}"
    refused = call(stack, "add_numbers", {"a": 1, "b": 2}, key=scoped, meta={"trace_id": trace})
    assert refused.is_error
    assert text_of(refused) == "error: forbidden: this API key may not call 'add_numbers'; it is limited to: echo"
    assert receipts_of(stack, trace) == []  # nothing stored
    allowed = call(stack, "echo", {"n": 1}, key=scoped)
    assert not allowed.is_error and allowed.structured_content == {"n": 1}


def test_a_read_only_key_lists_tools_but_calls_none(stack: Stack) -> None:
    reader = stack.db.run(create_key("tests", read_only=True))
    assert "echo" in tool_names(stack, reader)
    trace = f"trace_{uuid.uuid4().hex}"
    refused = call(stack, "echo", {"n": 1}, key=reader, meta={"trace_id": trace})
    assert refused.is_error
    assert text_of(refused) == "error: forbidden: this API key is read-only: it may list tools, but not call them"
    assert receipts_of(stack, trace) == []


def test_a_function_tool_is_answered_at_once_and_its_receipt_waits_for_the_client(stack: Stack) -> None:
    with stack.client() as client:
        defined = client.post("/v1/tools", json={"kind": "function", "name": "mcp_ask_person",
                                                 "description": "Ask a person to decide.",
                                                 "parameters": {"type": "object",
                                                                "properties": {"question": {"type": "string"}}}})
        assert defined.status_code == 201, defined.text
    result = call(stack, "mcp_ask_person", {"question": "ship it?"})
    assert result.is_error
    assert result.meta is not None
    receipt_id = result.meta[RECEIPT_ID]
    assert text_of(result) == (f"tool 'mcp_ask_person' runs on the client, not in toolrelay: receipt {receipt_id} "
                               f"waits for its result at POST /v1/receipts/{receipt_id}/result")
    with stack.client() as client:
        assert client.get(f"/v1/receipts/{receipt_id}").json()["status"] == "waiting"
        posted = client.post(f"/v1/receipts/{receipt_id}/result", json={"output": {"answer": "yes"}})
        assert posted.json()["status"] == "success"


def test_without_a_valid_key_mcp_answers_401_problem_json(stack: Stack) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                             "clientInfo": {"name": "test", "version": "1"}}}
    for headers in ({}, {"Authorization": "Bearer trk_not_a_key"}, {"Authorization": f"Basic {stack.api_key}"}):
        response = httpx.post(f"{stack.base_url}/mcp", json=initialize, timeout=10,
                              headers={"Accept": "application/json, text/event-stream", **headers})
        assert response.status_code == 401, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert response.json()["status"] == 401
    assert httpx.get(f"{stack.base_url}/mcp", timeout=10).status_code == 401


def test_a_session_serves_only_the_tenant_that_opened_it(stack: Stack) -> None:
    accept = {"Accept": "application/json, text/event-stream"}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                             "clientInfo": {"name": "test", "version": "1"}}}
    with httpx.Client(base_url=stack.base_url, timeout=10, headers=accept) as client:
        opened = client.post("/mcp", json=initialize, headers={"Authorization": f"Bearer {stack.api_key}"})
        assert opened.status_code == 200, opened.text
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        tools_list = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        other = client.post("/mcp", json=tools_list, headers={**session, "Authorization": f"Bearer {stack.other_key}"})
        assert other.status_code == 404  # as if the session did not exist
        assert client.post("/mcp", json=tools_list, headers=session).status_code == 401


def test_ending_the_session_cancels_its_calls_in_flight(stack: Stack) -> None:
    trace_id = trace()
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {stack.api_key}"}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                             "clientInfo": {"name": "test", "version": "1"}}}
    call_sleep = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                  "params": {"name": "sleep", "arguments": {"seconds": SLEEP_S}, "_meta": {TRACE_ID: trace_id}}}
    with httpx.Client(base_url=stack.base_url, timeout=30, headers=headers) as client:
        opened = client.post("/mcp", json=initialize)
        assert opened.status_code == 200, opened.text
        headers = {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        initialized = client.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                                  headers=headers)
        assert initialized.status_code == 202, initialized.text
        with client.stream("POST", "/mcp", json=call_sleep, headers=headers) as answer:  # no DELETE until it runs
            assert answer.status_code == 200
            deadline = time.monotonic() + 30
            while not [r for r in receipts_of(stack, trace_id) if r["status"] == "running"]:
                assert time.monotonic() < deadline, "the call did not start"
                time.sleep(0.1)
            assert client.delete("/mcp", headers=headers).status_code == 200
    (receipt,) = receipts_of(stack, trace_id)
    assert stack.wait_terminal(receipt["id"], timeout=15)["status"] == "canceled"


def test_the_2026_per_request_protocol_is_served_too(stack: Stack) -> None:
    """``mcp.Client`` speaks 2026-07-28 when the server offers it: no session, a cancel closes the stream."""
    echoed, slept = trace(), trace()
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async def scenario() -> tuple[str | None, types.CallToolResult]:
        headers = {"Authorization": f"Bearer {stack.api_key}"}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http, \
                Client(streamable_http_client(f"{stack.base_url}/mcp", http_client=http)) as client:
            assert "echo" in {tool.name for tool in (await client.list_tools()).tools}
            result = await client.call_tool("echo", {"a": 1}, progress_callback=on_progress,
                                            meta=meta_of({TRACE_ID: echoed}))
            with anyio.move_on_after(4):
                await client.call_tool("sleep", {"seconds": SLEEP_S}, meta=meta_of({TRACE_ID: slept}))
            return client.session.protocol_version, result

    version, result = anyio.run(scenario)
    assert version == "2026-07-28"
    assert result.structured_content == {"a": 1}
    assert result.meta is not None and result.meta[TRACE_ID] == echoed
    assert seen == [0, 1, 4]
    (receipt,) = receipts_of(stack, slept)
    assert stack.wait_terminal(receipt["id"], timeout=15)["status"] == "canceled"
