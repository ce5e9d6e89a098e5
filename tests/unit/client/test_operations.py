"""Each operation's request, as data: method, path, query, body, headers, how long the server may hold it."""

from __future__ import annotations

import pytest

from toolrelay.client import operations


def test_submit_sends_tool_and_arguments_and_only_the_fields_given() -> None:
    op = operations.submit("calculate", {"expression": "1 + 1"}, trace_id="trace_x", call_id=None,
                           metadata={"who": "tests"}, timeout_s=5)
    assert (op.method, op.path, op.params, op.headers) == ("POST", "/v1/tool-calls", {}, {})
    assert op.json == {"tool": "calculate", "arguments": {"expression": "1 + 1"}, "trace_id": "trace_x",
                       "metadata": {"who": "tests"}, "timeout_s": 5}
    assert op.holds_s == 0


def test_submit_without_arguments_sends_an_empty_object() -> None:
    assert operations.submit("echo").json == {"tool": "echo", "arguments": {}}


def test_submit_sends_the_idempotency_key_as_the_header_only() -> None:
    op = operations.submit("echo", {"n": 1}, idempotency_key="order-1042")
    assert op.headers == {"Idempotency-Key": "order-1042"}
    assert "idempotency_key" not in op.json


def test_submit_with_wait_s_is_held_that_long() -> None:
    op = operations.submit("echo", wait_s=12.5)
    assert op.json["wait_s"] == 12.5
    assert op.holds_s == 12.5
    assert (op.timeout(30).read, op.timeout(30).connect) == (42.5, 30)


def test_an_unknown_field_is_a_type_error_before_anything_is_sent() -> None:
    with pytest.raises(TypeError, match="unexpected field.*trace"):
        operations.submit("echo", trace="oops")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected field.*page_size"):
        operations.list_receipts(page_size=3)  # type: ignore[call-arg]


def test_get_receipt_long_polls_only_when_asked() -> None:
    plain = operations.get_receipt("rcpt_1")
    assert (plain.method, plain.path, plain.params, plain.holds_s) == ("GET", "/v1/receipts/rcpt_1", {}, 0)
    held = operations.get_receipt("rcpt_1", wait_s=60)
    assert (held.params, held.holds_s) == ({"wait_s": 60}, 60)


def test_ids_stay_one_path_segment() -> None:
    assert operations.get_receipt("../tools").path == "/v1/receipts/..%2Ftools"
    assert operations.cancel("a b?c").path == "/v1/receipts/a%20b%3Fc/cancel"
    for bad in ("", ".", ".."):
        with pytest.raises(ValueError, match="not an id"):
            operations.get_receipt(bad)


def test_list_receipts_sends_the_filters_and_follows_a_cursor() -> None:
    first = operations.list_receipts(trace_id="trace_x", status="success", limit=3, tool=None)
    assert (first.method, first.path, first.params) == ("GET", "/v1/receipts",
                                                        {"trace_id": "trace_x", "status": "success", "limit": 3})
    second = operations.with_cursor(first, "c2")
    assert second.params == {"trace_id": "trace_x", "status": "success", "limit": 3, "cursor": "c2"}
    assert first.params == {"trace_id": "trace_x", "status": "success", "limit": 3}  # unchanged


def test_events_cancel_and_tools_paths() -> None:
    events, cancel = operations.events("rcpt_1"), operations.cancel("rcpt_1")
    assert (events.method, events.path) == ("GET", "/v1/receipts/rcpt_1/events")
    assert (cancel.method, cancel.path, cancel.json) == ("POST", "/v1/receipts/rcpt_1/cancel", None)
    assert operations.list_tools().params == {}
    assert operations.vendor_tools("anthropic").params == {"format": "anthropic"}


@pytest.mark.parametrize(("kwargs", "body"), [
    ({"output": {"approved": True}}, {"output": {"approved": True}}),
    ({"output": None}, {"output": None}),
    ({"error": "card declined"}, {"error": {"message": "card declined"}}),
    ({"error": {"message": "no", "details": {"code": 7}}}, {"error": {"message": "no", "details": {"code": 7}}}),
])
def test_submit_result_posts_output_or_error(kwargs: dict[str, object], body: dict[str, object]) -> None:
    op = operations.submit_result("rcpt_1", **kwargs)  # type: ignore[arg-type]
    assert (op.method, op.path, op.json) == ("POST", "/v1/receipts/rcpt_1/result", body)


def test_submit_result_takes_exactly_one_of_output_or_error() -> None:
    with pytest.raises(TypeError, match="exactly one"):
        operations.submit_result("rcpt_1")
    with pytest.raises(TypeError, match="exactly one"):
        operations.submit_result("rcpt_1", output=1, error="and failed")


def test_approve_and_reject_say_who_and_why() -> None:
    assert operations.approve("rcpt_1", "ana").json == {"by": "ana"}
    approve = operations.approve("rcpt_1", "ana", comment="fine")
    assert (approve.method, approve.path, approve.json) == ("POST", "/v1/receipts/rcpt_1/approve",
                                                            {"by": "ana", "comment": "fine"})
    reject = operations.reject("rcpt_1", "bo", reason="too much")
    assert (reject.path, reject.json) == ("/v1/receipts/rcpt_1/reject", {"by": "bo", "reason": "too much"})


def test_batch_sends_format_message_fields_and_an_optional_key() -> None:
    message = {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                                                    "function": {"name": "echo", "arguments": "{}"}}]}
    op = operations.batch("openai_chat", message, trace_id="trace_b", wait_s=10, max_result_chars=500,
                          idempotency_key="step-3")
    assert (op.method, op.path, op.headers, op.holds_s) == ("POST", "/v1/batches", {"Idempotency-Key": "step-3"}, 10)
    assert op.json == {"format": "openai_chat", "message": message, "trace_id": "trace_b", "wait_s": 10,
                       "max_result_chars": 500}
    assert operations.batch("anthropic", {"role": "assistant", "content": []}).headers == {}


def test_get_batch_long_polls() -> None:
    op = operations.get_batch("batch_1", wait_s=20)
    assert (op.path, op.params, op.holds_s) == ("/v1/batches/batch_1", {"wait_s": 20}, 20)


def test_run_sends_model_input_tools_and_fields() -> None:
    op = operations.run("local", "What is 2 + 2?", ("calculate",), instructions="Be brief.", max_iterations=4,
                        timeout_s=120, idempotency_key="run-1")
    assert (op.method, op.path, op.headers) == ("POST", "/v1/runs", {"Idempotency-Key": "run-1"})
    assert op.json == {"model": "local", "input": "What is 2 + 2?", "tools": ["calculate"],
                       "instructions": "Be brief.", "max_iterations": 4, "timeout_s": 120}
    chat = operations.run("local", [{"role": "user", "content": "hi"}], [])
    assert chat.json["input"] == [{"role": "user", "content": "hi"}]


def test_runs_get_list_cancel() -> None:
    assert operations.get_run("run_1", wait_s=5).params == {"wait_s": 5}
    listing = operations.list_runs(trace_id="trace_r", status="failed")
    assert (listing.path, listing.params) == ("/v1/runs", {"trace_id": "trace_r", "status": "failed"})
    cancel = operations.cancel_run("run_1")
    assert (cancel.method, cancel.path) == ("POST", "/v1/runs/run_1/cancel")


def test_define_model_never_sends_a_key_it_was_not_given() -> None:
    op = operations.define_model("local", "https://llm.example.com/v1", "qwen2.5")
    assert (op.method, op.path, op.json) == ("PUT", "/v1/models/local",
                                             {"base_url": "https://llm.example.com/v1", "model": "qwen2.5"})
    keyed = operations.define_model("local", "https://llm.example.com/v1", "qwen2.5", api_key="sk-1",
                                    params={"temperature": 0})
    assert keyed.json["api_key"] == "sk-1" and keyed.json["params"] == {"temperature": 0}


def test_define_tool_posts_the_definition() -> None:
    op = operations.define_tool({"kind": "function", "name": "approve_refund", "parameters": {"type": "object"}})
    assert (op.method, op.path, op.json["kind"]) == ("POST", "/v1/tools", "function")


def test_client_options_carry_the_key_and_need_one() -> None:
    options = operations.client_options("http://127.0.0.1:8000", "trk_1")
    assert options["base_url"] == "http://127.0.0.1:8000"
    assert options["headers"]["Authorization"] == "Bearer trk_1"
    with pytest.raises(ValueError, match="api_key"):
        operations.client_options("http://127.0.0.1:8000", "")

