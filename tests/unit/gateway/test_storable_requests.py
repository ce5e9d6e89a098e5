"""Values PostgreSQL cannot store (a NUL, a lone surrogate, NaN or Infinity) are a 422 on every route,
before anything is written: found by fuzzing the API, each of them was a 500 (the statement failed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from receipts import tenants
from receipts.catalogue import tools as catalogue
from receipts.records import ToolSpec
from tests.support import sql
from tests.unit.gateway.conftest import Gateway, assert_problem

NUL = '"x\\u0000y"'
SURROGATE = '"\\ud800"'


def rows(gateway: Gateway) -> dict[str, int]:
    """How many rows every table of the schema holds."""
    names = [row[0] for row in sql.rows(gateway.db, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                                                    "AND tablename <> 'alembic_version'")]
    return {name: int(sql.value(gateway.db, f'SELECT count(*) FROM "{name}"')) for name in names}


def send(gateway: Gateway, method: str, path: str, raw: str | None = None, key: str | None = None) -> Any:
    headers = {**gateway.headers(key), "Content-Type": "application/json"}
    return gateway.client.request(method, path, content=None if raw is None else raw.encode(), headers=headers)


@pytest.mark.parametrize(("raw", "field"), [
    (f'{{"tool": "echo", "arguments": {{"a": {NUL}}}}}', "arguments.a"),
    (f'{{"tool": "echo", "arguments": {{"a": [1, {SURROGATE}]}}}}', "arguments.a.1"),
    ('{"tool": "echo", "arguments": {"a\\u0000": 1}}', "arguments.a\\u0000"),
    ('{"tool": "echo", "arguments": {"\\udc00": 1}}', "arguments.\\udc00"),
    ('{"tool": "echo", "arguments": {"a": NaN}}', "arguments.a"),
    ('{"tool": "echo", "arguments": {"a": -Infinity}}', "arguments.a"),
    ('{"tool": "echo", "arguments": {"a": 1e400}}', "arguments.a"),
    (f'{{"tool": "echo", "trace_id": {NUL}}}', "trace_id"),
    (f'{{"tool": "echo", "call_id": {SURROGATE}}}', "call_id"),
    (f'{{"tool": {NUL}}}', "tool"),
    (f'{{"tool": "echo", "metadata": {{"k": {NUL}}}}}', "metadata.k"),
    ('{"tool": "echo", "timeout_s": Infinity}', "timeout_s"),
    (f'{{"tool": "echo", "idempotency_key": {NUL}}}', "idempotency_key"),
])
def test_a_call_holding_what_postgresql_cannot_store_is_a_422_and_stores_nothing(gateway: Gateway, raw: str,
                                                                                 field: str) -> None:
    before = rows(gateway)
    body = assert_problem(send(gateway, "POST", "/v1/tool-calls", raw), 422)
    assert [error["field"] for error in body["errors"]] == [field]
    assert "cannot" in body["errors"][0]["message"] or "finite" in body["errors"][0]["message"]
    json.dumps(body, ensure_ascii=False).encode()  # the problem itself holds no surrogate
    assert rows(gateway) == before
    assert gateway.executes() == []


@pytest.mark.parametrize(("method", "path", "raw", "field"), [
    ("POST", "/v1/batches", f'{{"format": "anthropic", "message": {{"role": "assistant", "content": [{{"type": '
                            f'"tool_use", "id": "t1", "name": "echo", "input": {{"q": {NUL}}}}}]}}}}',
     "message.content.0.input.q"),
    ("POST", "/v1/batches", f'{{"format": "openai_chat", "message": {{}}, "metadata": {{"m": {SURROGATE}}}}}',
     "metadata.m"),
    ("PUT", "/v1/models/assistant", '{"base_url": "http://127.0.0.1:9/v1", "model": "m", "params": {"t": NaN}}',
     "params.t"),
    ("POST", "/v1/runs", f'{{"model": "assistant", "input": {NUL}, "tools": []}}', "input"),
    ("POST", "/v1/tools", f'{{"kind": "function", "name": "f", "description": {NUL}}}', "description"),
    ("PUT", "/v1/tools/f", '{"kind": "function", "name": "f", "parameters": {"type": "object", "maximum": NaN}}',
     "parameters.maximum"),
    ("POST", "/v1/webhook-endpoints", f'{{"url": "http://127.0.0.1:9/", "description": {NUL}}}', "description"),
    ("PATCH", "/v1/webhook-endpoints/whep_x", f'{{"description": {SURROGATE}}}', "description"),
    ("POST", "/v1/webhook-endpoints/whep_x/recover", f'{{"since": {NUL}}}', "since"),
    ("PUT", "/v1/integrations/email/setup", f'{{"host": {NUL}}}', "host"),
    ("POST", "/v1/receipts/rcpt_x/result", f'{{"output": {{"o": {NUL}}}}}', "output.o"),
    ("POST", "/v1/receipts/rcpt_x/approve", f'{{"by": {SURROGATE}}}', "by"),
    ("POST", "/v1/receipts/rcpt_x/reject", '{"by": "ana", "reason": "x\\u0000"}', "reason"),
])
def test_every_route_refuses_a_body_postgresql_cannot_store_before_it_runs(gateway: Gateway, method: str, path: str,
                                                                          raw: str, field: str) -> None:
    before = rows(gateway)
    body = assert_problem(send(gateway, method, path, raw), 422)
    assert [error["field"] for error in body["errors"]] == [field]
    assert rows(gateway) == before


@pytest.mark.parametrize(("path", "field"), [
    ("/v1/receipts/rcpt_%00", "receipt_id"),
    ("/v1/receipts/rcpt_%00/events", "receipt_id"),
    ("/v1/tools/ec%00ho", "name"),
    ("/v1/batches/batch_%00", "batch_id"),
    ("/v1/runs/run_%00", "run_id"),
    ("/v1/models/m%00", "name"),
    ("/v1/webhook-endpoints/whep_%00", "endpoint_id"),
    ("/v1/deliveries/msg_%00", "message_id"),
    ("/v1/integrations/e%00mail/setup", "provider"),
    ("/v1/receipts?trace_id=a%00b", "trace_id"),
    ("/v1/receipts?tool=echo&cursor=%00", "cursor"),
    ("/v1/runs?trace_id=%00", "trace_id"),
    ("/v1/deliveries?receipt_id=%00&endpoint_id=x", "receipt_id"),
    ("/v1/webhook-endpoints/whep_x/deliveries?status=%00", "status"),
])
def test_a_path_or_query_holding_a_nul_is_a_422_naming_the_parameter(gateway: Gateway, path: str, field: str) -> None:
    body = assert_problem(gateway.client.get(path, headers=gateway.headers()), 422)
    assert body["errors"] == [{"field": field, "message": "contains a NUL character (\\u0000), which PostgreSQL "
                                                          "cannot store"}]


def test_the_key_is_checked_first_then_what_it_may_do_then_the_values(gateway: Gateway) -> None:
    raw = f'{{"tool": "echo", "arguments": {{"a": {NUL}}}}}'
    assert_problem(gateway.client.post("/v1/tool-calls", content=raw.encode()), 401)
    assert_problem(send(gateway, "POST", "/v1/tool-calls", raw, key="trk_unknown"), 401)
    read_only = gateway.db.run(tenants.create_key("acme", read_only=True))
    assert_problem(send(gateway, "POST", "/v1/tool-calls", raw, key=read_only), 403)
    assert_problem(gateway.client.get("/v1/receipts/rcpt_%00"), 401)


def test_a_route_that_reads_no_body_is_not_troubled_by_one(gateway: Gateway) -> None:
    receipt = gateway.post_call({"tool": "echo", "arguments": {"x": 1}}).json()
    canceled = send(gateway, "POST", f"/v1/receipts/{receipt['id']}/cancel", "this is no JSON {")
    assert canceled.status_code == 200, canceled.text
    assert canceled.json()["status"] == "canceled"


def test_values_postgresql_stores_pass_untouched(gateway: Gateway) -> None:
    arguments = {"text": "😀 é \\u0000 is text", "pair": "\ud83d\ude00".encode("utf-16", "surrogatepass")
                 .decode("utf-16"), "big": 10 ** 40, "float": -2.5e-300, "deep": [[[{"k": None}]]]}
    response = gateway.post_call({"tool": "echo", "arguments": arguments})
    assert response.status_code == 202, response.text
    assert response.json()["input"] == arguments
    stored = gateway.client.get(f"/v1/receipts/{response.json()['id']}", headers=gateway.headers()).json()
    assert stored["input"] == arguments


def test_a_models_arguments_that_cannot_be_stored_are_its_mistake_in_a_batch(gateway: Gateway) -> None:
    message = {"role": "assistant", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": '{"q": "a\\u0000b"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "echo", "arguments": '{"n": NaN}'}},
        {"id": "call_3", "type": "function", "function": {"name": "echo", "arguments": "[" * 5000 + "]" * 5000}},
        {"id": "call_4", "type": "function", "function": {"name": "echo", "arguments": '{"q": 1}'}}]}
    response = gateway.client.post("/v1/batches", json={"format": "openai_chat", "message": message, "wait_s": 0},
                                   headers=gateway.headers())
    assert response.status_code in (200, 202), response.text
    ids = response.json()["receipts"]
    receipts = [gateway.client.get(f"/v1/receipts/{rid}", headers=gateway.headers()).json() for rid in ids]
    assert [r["status"] for r in receipts] == ["failed", "failed", "failed", "pending"]
    assert {r["error"]["code"] for r in receipts[:3]} == {"invalid_arguments"}
    assert "arguments.q contains a NUL character" in receipts[0]["error"]["message"]
    assert "arguments.n must be a finite number" in receipts[1]["error"]["message"]
    assert "cannot be read" in receipts[2]["error"]["message"]
    assert [r["input"] for r in receipts] == [{}, {}, {}, {"q": 1}]


def mcp_post(gateway: Gateway, body: dict[str, Any], session: dict[str, str] | None = None) -> Any:
    headers = {**gateway.headers(), "Accept": "application/json, text/event-stream", **(session or {})}
    return gateway.client.post("/mcp", json=body, headers=headers)


def mcp_result(response: Any) -> dict[str, Any]:
    """The JSON-RPC message of an MCP answer, sent as JSON or as one server-sent event."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])  # type: ignore[no-any-return]
    return response.json()  # type: ignore[no-any-return]


def test_an_mcp_call_holding_what_postgresql_cannot_store_is_a_tool_error_and_stores_nothing(gateway: Gateway) -> None:
    gateway.db.run(catalogue.publish([ToolSpec(name="echo", kind="python", description="Echo.",
                                               parameters={"type": "object"}, effect="read")]))
    opened = mcp_post(gateway, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                           "clientInfo": {"name": "test", "version": "1"}}})
    assert opened.status_code == 200, opened.text
    session = {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    before = rows(gateway)
    for index, params in enumerate([{"name": "echo", "arguments": {"a": "x\x00y"}},
                                    {"name": "echo", "arguments": {"a\x00": 1}},
                                    {"name": "ec\x00ho", "arguments": {}},
                                    {"name": "echo", "arguments": {}, "_meta": {"toolrelay/trace_id": "t\x00"}}]):
        answer = mcp_result(mcp_post(gateway, {"jsonrpc": "2.0", "id": 10 + index, "method": "tools/call",
                                               "params": params}, session))
        assert answer["result"]["isError"] is True, answer
        assert "NUL character" in answer["result"]["content"][0]["text"], answer
    assert rows(gateway) == before
