"""POST /v1/tool-calls: accepted means stored and published; bad input changes nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from receipts import tenants
from receipts.store import calls
from tests.unit.gateway.conftest import Gateway, assert_problem

MIB = 1024 * 1024


def test_call_is_accepted_stored_and_published(gateway: Gateway) -> None:
    response = gateway.post_call({"tool": "echo", "arguments": {"x": 1}, "trace_id": "trace_t", "call_id": "c1",
                                  "metadata": {"user": "u1"}})
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "pending"
    assert body["id"].startswith("rcpt_")
    assert (body["tool"], body["kind"], body["input"]) == ("echo", "python", {"x": 1})
    assert (body["trace_id"], body["call_id"], body["metadata"]) == ("trace_t", "c1", {"user": "u1"})
    assert body["attempt"] == 0 and body["output"] is None and body["error"] is None
    assert response.headers["location"] == f"/v1/receipts/{body['id']}"
    assert gateway.db.run(calls.get(gateway.tenant_id, body["id"])).status == "pending"
    [message] = gateway.executes()
    assert message.args == [body["id"], 5 + 15.0]  # timeout plus the default lease grace
    assert message.options["queue"] == "tools"


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded"])
def test_curl_style_body_without_json_content_type_is_accepted(gateway: Gateway, content_type: str | None) -> None:
    headers = gateway.headers()
    if content_type:
        headers["Content-Type"] = content_type
    response = gateway.client.post("/v1/tool-calls", content=b'{"tool":"echo","arguments":{"x":1}}', headers=headers)
    assert response.status_code == 202, response.text
    assert response.json()["input"] == {"x": 1}


def test_malformed_json_is_a_400_problem_and_stores_nothing(gateway: Gateway) -> None:
    response = gateway.client.post("/v1/tool-calls", content=b'{"tool": "echo", "arguments": {',
                                   headers={**gateway.headers(), "Content-Type": "application/json"})
    body = assert_problem(response, 400)
    assert body["errors"][0]["field"] == "body"
    assert gateway.receipt_count() == 0
    assert gateway.executes() == []


@pytest.mark.parametrize("payload", [b"[1, 2]", b'"echo"', b'{"arguments": {}}', b'{"tool": "echo", "bogus": 1}',
                                     b'{"tool": "echo", "arguments": [1]}'])
def test_a_body_of_the_wrong_shape_is_a_422_with_field_errors(gateway: Gateway, payload: bytes) -> None:
    response = gateway.client.post("/v1/tool-calls", content=payload,
                                   headers={**gateway.headers(), "Content-Type": "application/json"})
    body = assert_problem(response, 422)
    assert body["errors"] and all(set(e) == {"field", "message"} for e in body["errors"])
    assert gateway.receipt_count() == 0


def test_unknown_tool_is_a_422_naming_the_tool_field(gateway: Gateway) -> None:
    body = assert_problem(gateway.post_call({"tool": "nope", "arguments": {}}), 422)
    assert body["errors"] == [{"field": "tool", "message": body["errors"][0]["message"]}]
    assert "nope" in body["errors"][0]["message"]
    assert gateway.receipt_count() == 0
    assert gateway.executes() == []


def test_arguments_violating_the_schema_are_a_422_with_every_field_error(gateway: Gateway) -> None:
    body = assert_problem(gateway.post_call({"tool": "add", "arguments": {"a": "one", "c": 3}}), 422)
    fields = {e["field"] for e in body["errors"]}
    assert fields == {"arguments", "arguments.a"}  # b missing / c not allowed are object-level; a has a bad type
    assert all(e["message"] for e in body["errors"])
    assert gateway.receipt_count() == 0
    assert gateway.executes() == []


def test_schema_constraints_are_enforced(gateway: Gateway) -> None:
    body = assert_problem(gateway.post_call({"tool": "charge", "arguments": {"cents": 0}}), 422)
    assert body["errors"][0]["field"] == "arguments.cents"
    assert gateway.post_call({"tool": "charge", "arguments": {"cents": 5}}).status_code == 202


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer trk_wrong"}, {"Authorization": "Basic abc"},
                                     {"Authorization": "Bearer "}])
def test_missing_or_wrong_key_is_a_401(gateway: Gateway, headers: dict[str, str]) -> None:
    response = gateway.client.post("/v1/tool-calls", json={"tool": "echo", "arguments": {}}, headers=headers)
    assert_problem(response, 401)
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert gateway.receipt_count() == 0
    assert_problem(gateway.client.get("/v1/receipts", headers=headers), 401)


@pytest.mark.parametrize("payload", [b'{"tool": "echo", "arguments": {', b"not json", b"[" * 100_000,
                                     b'{"tool": "echo", "arguments": {"n": ' + b"9" * 5000 + b"}}"])
@pytest.mark.parametrize("path", ["/v1/tool-calls", "/v1/batches", "/v1/webhook-endpoints"])
def test_a_body_that_cannot_be_read_without_a_valid_key_is_a_401_first(gateway: Gateway, payload: bytes,
                                                                       path: str) -> None:
    json_type = {"Content-Type": "application/json"}
    for headers in ({}, {"Authorization": "Bearer trk_wrong"}):
        response = gateway.client.post(path, content=payload, headers={**headers, **json_type})
        assert_problem(response, 401)  # found by fuzzing: it was the body's 400, before the key was looked at
        assert response.headers["www-authenticate"].startswith("Bearer")
    read_only = gateway.db.run(tenants.create_key("acme", read_only=True))
    assert_problem(gateway.client.post(path, content=payload, headers={**gateway.headers(read_only), **json_type}),
                   403)
    assert_problem(gateway.client.post(path, content=payload, headers={**gateway.headers(), **json_type}), 400)
    assert gateway.receipt_count() == 0


def test_body_over_one_mib_with_content_length_is_a_413(gateway: Gateway) -> None:
    payload = json.dumps({"tool": "echo", "arguments": {"blob": "x" * MIB}}).encode()
    response = gateway.client.post("/v1/tool-calls", content=payload,
                                   headers={**gateway.headers(), "Content-Type": "application/json"})
    assert_problem(response, 413)
    assert gateway.receipt_count() == 0


def test_chunked_body_over_one_mib_is_a_413(gateway: Gateway) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"tool": "echo", "arguments": {"blob": "'
        for _ in range(20):
            yield b"x" * 64 * 1024
        yield b'"}}'

    response = gateway.client.post("/v1/tool-calls", content=chunks(),
                                   headers={**gateway.headers(), "Content-Type": "application/json"})
    assert_problem(response, 413)
    assert gateway.receipt_count() == 0


def test_body_just_under_the_limit_is_accepted(gateway: Gateway) -> None:
    filler = MIB - 200
    response = gateway.post_call({"tool": "echo", "arguments": {"blob": "x" * filler}})
    assert response.status_code == 202


def test_idempotency_key_header_replays_the_same_receipt(gateway: Gateway) -> None:
    body = {"tool": "echo", "arguments": {"x": 1}}
    first = gateway.post_call(body, headers={"Idempotency-Key": "order-42"})
    again = gateway.post_call({**body, "wait_s": 0}, headers={"Idempotency-Key": "order-42"})
    assert first.status_code == 202 and "idempotent-replayed" not in first.headers
    assert again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["idempotency_key"] == "order-42"
    assert gateway.receipt_count() == 1
    assert len(gateway.executes()) == 1


def test_idempotency_key_in_the_body_works_like_the_header(gateway: Gateway) -> None:
    body = {"tool": "echo", "arguments": {"x": 1}, "idempotency_key": "k-body"}
    first = gateway.post_call(body)
    again = gateway.post_call({"tool": "echo", "arguments": {"x": 1}}, headers={"Idempotency-Key": "k-body"})
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]


def test_same_key_with_a_different_request_is_a_422(gateway: Gateway) -> None:
    gateway.post_call({"tool": "echo", "arguments": {"x": 1}}, headers={"Idempotency-Key": "k1"})
    response = gateway.post_call({"tool": "echo", "arguments": {"x": 2}}, headers={"Idempotency-Key": "k1"})
    body = assert_problem(response, 422)
    assert body["errors"][0]["field"] == "idempotency_key"
    assert gateway.receipt_count() == 1


def test_header_and_body_keys_that_differ_are_a_422(gateway: Gateway) -> None:
    response = gateway.post_call({"tool": "echo", "arguments": {}, "idempotency_key": "a"},
                                 headers={"Idempotency-Key": "b"})
    assert assert_problem(response, 422)["errors"][0]["field"] == "idempotency_key"
    assert gateway.receipt_count() == 0


def test_keys_of_different_tenants_do_not_collide(gateway: Gateway) -> None:
    body = {"tool": "echo", "arguments": {"x": 1}}
    mine = gateway.post_call(body, headers={"Idempotency-Key": "shared"})
    theirs = gateway.post_call(body, key=gateway.other_key, headers={"Idempotency-Key": "shared"})
    assert theirs.status_code == 202
    assert theirs.json()["id"] != mine.json()["id"]


def test_wait_s_returns_the_terminal_receipt_with_200(gateway: Gateway) -> None:
    original = gateway.sender.send_task

    def send_and_run(name: str, args: object = None, **options: object) -> None:
        original(name, args, **options)
        if name == "toolrelay.execute":
            gateway.finish_soon(args[0], 0.3)  # type: ignore[index]

    gateway.sender.send_task = send_and_run  # type: ignore[method-assign]
    started = time.monotonic()
    response = gateway.post_call({"tool": "echo", "arguments": {"x": 1}, "wait_s": 60})
    assert response.status_code == 200
    assert response.json()["status"] == "success"
    assert response.json()["output"] == {"x": 1}
    assert time.monotonic() - started < 30  # answered once it settled, not at the end of the 60 s wait


def test_wait_s_returns_the_pending_receipt_with_202_when_it_does_not_finish(gateway: Gateway) -> None:
    started = time.monotonic()
    response = gateway.post_call({"tool": "echo", "arguments": {"x": 1}, "wait_s": 1})
    assert response.status_code == 202
    assert response.json()["status"] == "pending"
    assert time.monotonic() - started >= 1


@pytest.mark.parametrize("field", [{"wait_s": 61}, {"wait_s": -1}, {"timeout_s": 0}, {"timeout_s": 10**9}])
def test_out_of_range_options_are_422(gateway: Gateway, field: dict[str, float]) -> None:
    assert_problem(gateway.post_call({"tool": "echo", "arguments": {}, **field}), 422)
    assert gateway.receipt_count() == 0


def test_timeout_s_sets_the_call_deadline(gateway: Gateway) -> None:
    body = gateway.post_call({"tool": "echo", "arguments": {}, "timeout_s": 90}).json()
    receipt = gateway.db.run(calls.get(gateway.tenant_id, body["id"]))
    assert (receipt.deadline_at - receipt.created_at).total_seconds() == 90


def test_a_broker_failure_after_the_commit_still_accepts_the_call(gateway: Gateway) -> None:
    def broken(*_: object, **__: object) -> None:
        raise ConnectionError("broker down")

    gateway.sender.send_task = broken  # type: ignore[method-assign]
    response = gateway.post_call({"tool": "echo", "arguments": {"x": 1}})
    assert response.status_code == 202
    receipt = gateway.db.run(calls.get(gateway.tenant_id, response.json()["id"]))
    assert receipt.status == "pending"  # the sweeper sends it
