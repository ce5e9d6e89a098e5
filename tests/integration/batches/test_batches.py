"""POST /v1/batches on a real deployment: a model's tool calls in its own format, the messages to append out."""

from __future__ import annotations

import json
import threading
import uuid
from datetime import datetime
from typing import Any

import httpx

from tests.integration.batches.conftest import MAX_CALLS, Tenant
from tests.support.receiver import Receiver
from tests.support.stack import Stack
from tests.support.tools import count_effects
from tests.unit.agents import vendor_types


def chat(*calls: tuple[str, str, Any]) -> dict[str, Any]:
    """An OpenAI Chat assistant message calling ``(id, tool, arguments)`` (a str is sent as it is)."""
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}}
        for call_id, name, arguments in calls]}


def at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_openai_chat_calls_run_in_parallel_and_their_messages_come_back_in_call_order(tenant: Tenant) -> None:
    message = chat(("call_b", "short_read", {"tag": "b", "seconds": 1.0}),
                   ("call_a", "short_read", {"tag": "a", "seconds": 1.0}),
                   ("call_c", "calculate", {"expression": "6 * 7"}))
    batch = tenant.batch("openai_chat", message, wait_s=30).json()
    assert batch["status"] == "completed" and batch["format"] == "openai_chat"
    assert [m["tool_call_id"] for m in batch["messages"]] == ["call_b", "call_a", "call_c"]
    receipts = [tenant.receipt(receipt_id) for receipt_id in batch["receipts"]]
    assert [r["call_id"] for r in receipts] == ["call_b", "call_a", "call_c"]
    assert {r["trace_id"] for r in receipts} == {batch["trace_id"]}
    assert all(r["status"] == "success" for r in receipts)
    first, second = receipts[0], receipts[1]
    # Both sleeps were running at once: each started before the other finished.
    assert at(first["started_at"]) < at(second["finished_at"]) and at(second["started_at"]) < at(first["finished_at"])
    assert batch["messages"][2]["content"] == f'{{"result": 42}}\n[receipt {receipts[2]["id"]}]'
    for message_out in batch["messages"]:
        vendor_types.openai_chat_tool_message(message_out)


def test_what_the_model_got_wrong_becomes_failed_receipts_and_messages_it_can_act_on(tenant: Tenant) -> None:
    message = chat(("c1", "no_such_tool", {}), ("c2", "sleep", {"seconds": "long"}), ("c3", "echo", "{oops"),
                   ("c4", "boom", {"message": "kaput"}), ("c5", "echo", {"fine": True}))
    batch = tenant.batch("openai_chat", message).json()
    receipts = [tenant.receipt(receipt_id) for receipt_id in batch["receipts"]]
    assert [(r["status"], (r["error"] or {}).get("code")) for r in receipts] == [
        ("failed", "not_found"), ("failed", "invalid_arguments"), ("failed", "invalid_arguments"),
        ("failed", "tool_error"), ("success", None)]
    contents = [m["content"] for m in batch["messages"]]
    assert contents[0].startswith("error: not_found: no tool named 'no_such_tool'")
    assert "echo" in contents[0] and "calculate" in contents[0]  # the tools it may call instead
    assert "- arguments.seconds: 'long' is not of type 'number'" in contents[1]
    assert "not valid JSON" in contents[2]
    assert contents[3].startswith("error: tool_error:") and "kaput" in contents[3]
    assert contents[4].startswith('{"fine": true}')  # one failure hides nobody else's result
    assert all(f"[receipt {r['id']}]" in c for r, c in zip(receipts, contents, strict=True))


def test_a_long_result_is_cut_for_the_model_and_kept_whole_in_the_receipt(tenant: Tenant) -> None:
    text = "".join(f"line {i:05d}\n" for i in range(2000))  # 22,000 characters
    batch = tenant.batch("openai_chat", chat(("c1", "echo", {"text": text})), max_result_chars=1000).json()
    content = batch["messages"][0]["content"]
    receipt = tenant.receipt(batch["receipts"][0])
    assert len(content) <= 1000
    assert content.startswith('{"text": "line 00000')  # the head
    assert "line 01999" in content  # the tail
    assert "characters left out" in content and receipt["id"] in content
    assert receipt["output"] == {"text": text}


def test_anthropic_results_are_one_user_message_of_tool_results_with_is_error(tenant: Tenant) -> None:
    message = {"role": "assistant", "content": [
        {"type": "text", "text": "Looking it up."},
        {"type": "tool_use", "id": "toolu_1", "name": "calculate", "input": {"expression": "1 / 0"}},
        {"type": "tool_use", "id": "toolu_2", "name": "echo", "input": {"ok": 1}}]}
    batch = tenant.batch("anthropic", message).json()
    (user,) = batch["messages"]
    assert user["role"] == "user"
    assert [(b["tool_use_id"], b["is_error"]) for b in user["content"]] == [("toolu_1", True), ("toolu_2", False)]
    assert user["content"][0]["content"].startswith("error: invalid_arguments: division by zero")
    vendor_types.anthropic_user_message(user)


def test_openai_responses_function_calls_get_function_call_outputs(tenant: Tenant) -> None:
    output = [{"type": "reasoning", "id": "rs_1", "summary": []},
              {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "echo", "arguments": '{"a": 1}'}]
    batch = tenant.batch("openai_responses", output).json()
    (item,) = batch["messages"]
    assert (item["type"], item["call_id"]) == ("function_call_output", "call_1")
    assert item["output"].startswith('{"a": 1}')
    vendor_types.openai_responses_output(item)


def test_the_same_trace_and_call_ids_return_the_same_batch_and_run_nothing_again(stack: Stack, tenant: Tenant) -> None:
    tag = f"once-{uuid.uuid4().hex[:8]}"
    message = chat(("call_1", "short_write", {"tag": tag, "seconds": 0}))
    first = tenant.batch("openai_chat", message, trace_id=f"trace_{tag}")
    again = tenant.batch("openai_chat", message, trace_id=f"trace_{tag}")
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["receipts"] == first.json()["receipts"]
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["messages"] == first.json()["messages"]
    assert count_effects(stack.effects, tag, "start") == 1
    assert tenant.counts() == (1, 1)
    changed = tenant.batch("openai_chat", chat(("call_1", "short_write", {"tag": tag, "seconds": 1})),
                           trace_id=f"trace_{tag}", expect=422)
    assert changed.json()["type"] == "/problems/idempotency-key-reused"


def test_concurrent_duplicates_under_one_key_make_one_batch(stack: Stack, tenant: Tenant) -> None:
    tag = f"dup-{uuid.uuid4().hex[:8]}"
    message = chat(("call_1", "short_write", {"tag": tag, "seconds": 0}), ("call_2", "echo", {"n": 2}))
    answers: list[httpx.Response] = []

    def send() -> None:
        answers.append(tenant.batch("openai_chat", message, headers={"Idempotency-Key": tag}, expect=None))

    threads = [threading.Thread(target=send) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(answers) == 6 and all(a.status_code == 200 for a in answers)
    assert len({a.json()["id"] for a in answers}) == 1
    assert tenant.counts() == (2, 1)
    assert count_effects(stack.effects, tag, "start") == 1


def test_a_slow_batch_answers_202_and_a_long_poll_completes_it(tenant: Tenant) -> None:
    accepted = tenant.batch("openai_chat", chat(("c1", "short_read", {"tag": "slow", "seconds": 1.5})),
                            wait_s=0, expect=202)
    body = accepted.json()
    assert body["status"] == "running" and body["messages"] is None
    assert accepted.headers["location"] == f"/v1/batches/{body['id']}"
    with tenant.client() as client:
        done = client.get(accepted.headers["location"], params={"wait_s": 20})
    assert done.status_code == 200 and done.json()["status"] == "completed"
    assert done.json()["messages"][0]["content"].startswith('{"tag": "slow"')


def test_a_function_tool_waits_for_its_result_and_then_the_batch_completes(tenant: Tenant) -> None:
    with tenant.client() as client:
        defined = client.post("/v1/tools", json={"kind": "function", "name": "ask_person", "parameters": {
            "type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}})
        assert defined.status_code == 201, defined.text
    accepted = tenant.batch("openai_chat", chat(("c1", "ask_person", {"question": "ship it?"}),
                                                ("c2", "echo", {"n": 1})), wait_s=2, expect=202).json()
    waiting = tenant.receipt(accepted["receipts"][0])
    assert waiting["status"] == "waiting"
    with tenant.client() as client:
        assert client.get(f"/v1/batches/{accepted['id']}").json()["status"] == "running"
        posted = client.post(f"/v1/receipts/{waiting['id']}/result", json={"output": "yes, ship it"})
        assert posted.status_code == 200, posted.text
        done = client.get(f"/v1/batches/{accepted['id']}", params={"wait_s": 10}).json()
    assert done["status"] == "completed"
    assert done["messages"][0]["content"] == f"yes, ship it\n[receipt {waiting['id']}]"


def test_batch_completed_is_a_signed_webhook_with_the_messages(tenant: Tenant) -> None:
    receiver = Receiver().start()
    try:
        with tenant.client() as client:
            endpoint = client.post("/v1/webhook-endpoints", json={"url": receiver.url,
                                                                  "event_types": ["batch.completed"]})
            assert endpoint.status_code == 201, endpoint.text
        receiver.secrets.append(endpoint.json()["secret"])
        batch = tenant.batch("openai_chat", chat(("c1", "echo", {"n": 1}))).json()
        (request,) = receiver.wait_for(1, timeout=30)
    finally:
        receiver.stop()
    assert request.verified_by == (0,)
    assert request.payload["type"] == "batch.completed"
    assert request.payload["data"]["id"] == batch["id"]
    assert request.payload["data"]["messages"] == batch["messages"]


def test_another_tenant_cannot_see_a_batch(stack: Stack, tenant: Tenant) -> None:
    batch = tenant.batch("openai_chat", chat(("c1", "echo", {"n": 1}))).json()
    with stack.client(stack.other_key) as intruder:
        assert intruder.get(f"/v1/batches/{batch['id']}").status_code == 404


def test_a_malformed_envelope_or_bad_field_is_a_422_that_stores_nothing(tenant: Tenant) -> None:
    one_call = chat(("c1", "echo", {}))
    bad = [
        ({"format": "gemini", "message": one_call}, "format"),
        ({"format": "openai_chat", "message": {"role": "assistant", "content": "no calls"}}, "message.tool_calls"),
        ({"format": "anthropic", "message": {"role": "assistant", "content": [{"type": "text", "text": "x"}]}},
         "message.content"),
        ({"format": "openai_chat", "message": one_call, "wait_s": 61}, "wait_s"),
        ({"format": "openai_chat", "message": one_call, "max_result_chars": 10}, "max_result_chars"),
        ({"format": "openai_chat", "message": chat(*[(f"c{i}", "echo", {}) for i in range(MAX_CALLS + 1)])},
         "message"),
        ({"format": "openai_chat", "message": one_call, "surprise": 1}, "surprise"),
    ]
    with tenant.client() as client:
        for body, field in bad:
            response = client.post("/v1/batches", json=body)
            assert response.status_code == 422, (body, response.text)
            assert response.headers["content-type"].startswith("application/problem+json")
            assert field in [error["field"] for error in response.json()["errors"]], (field, response.json())
    assert tenant.counts() == (0, 0)
