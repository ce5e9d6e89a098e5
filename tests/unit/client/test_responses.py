"""Reading answers: records from the API's JSON, listings, and the error each status stands for."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from tests.unit.client import payloads
from toolrelay.client import errors, responses
from toolrelay.client.records import Batch, Event, Model, Receipt, Run, Tool, record


def answer(status: int, body: Any = None, headers: dict[str, str] | None = None, **kwargs: Any) -> httpx.Response:
    request = httpx.Request("GET", "http://toolrelay.test/v1/receipts/rcpt_1")
    if body is not None:
        kwargs["json"] = body
    return httpx.Response(status, headers=headers, request=request, **kwargs)


def test_a_receipt_has_the_api_fields_as_attributes() -> None:
    body = payloads.receipt(status="success", output={"result": 20}, attempt=1, finished_at="2026-11-29T19:30:03Z")
    receipt = responses.one(Receipt)(answer(200, body))
    assert (receipt.id, receipt.status, receipt.tool, receipt.output, receipt.attempt) == (
        body["id"], "success", "echo", {"result": 20}, 1)
    assert receipt.created_at == datetime(2026, 11, 29, 19, 30, 2, 933587, tzinfo=UTC)
    assert receipt.finished_at == datetime(2026, 11, 29, 19, 30, 3, tzinfo=UTC)
    assert receipt.started_at is None
    assert receipt.terminal
    assert receipt.extra == {}


@pytest.mark.parametrize(("status", "terminal"), [("pending", False), ("running", False), ("waiting", False),
                                                  ("success", True), ("failed", True),
                                                  ("partially_succeeded", True), ("canceled", True)])
def test_terminal_follows_the_state_machine(status: str, terminal: bool) -> None:
    assert record(Receipt, payloads.receipt(status=status)).terminal is terminal


def test_fields_a_newer_server_adds_are_kept_in_extra() -> None:
    receipt = record(Receipt, payloads.receipt(approval={"state": "requested"}, priority=5, shard="b"))
    assert receipt.approval == {"state": "requested"}
    assert receipt.extra == {"priority": 5, "shard": "b"}


def test_a_receipt_without_a_required_field_is_an_unexpected_response() -> None:
    body = payloads.receipt()
    del body["status"]
    with pytest.raises(errors.UnexpectedResponse, match="without 'status'"):
        record(Receipt, body)
    with pytest.raises(errors.UnexpectedResponse, match="created_at is not valid"):
        record(Receipt, payloads.receipt(created_at="yesterday"))
    with pytest.raises(errors.UnexpectedResponse, match="JSON object"):
        record(Receipt, ["not", "an", "object"])


def test_a_listing_is_a_page_with_its_cursor() -> None:
    body = {"data": [payloads.receipt(id="rcpt_2"), payloads.receipt(id="rcpt_1")], "next_cursor": "abc"}
    page = responses.page(Receipt)(answer(200, body))
    assert [r.id for r in page.items] == ["rcpt_2", "rcpt_1"]
    assert page.next_cursor == "abc"
    assert responses.page(Receipt)(answer(200, {"data": [], "next_cursor": None})).next_cursor is None
    with pytest.raises(errors.UnexpectedResponse, match="listing"):
        responses.page(Receipt)(answer(200, [payloads.receipt()]))


def test_events_tools_batches_and_runs_parse() -> None:
    event = record(Event, {"id": 5, "at": "2026-11-29T19:30:05.949394Z", "from_status": "pending",
                           "to_status": "running", "attempt": 1, "actor": "worker:vm:25162", "detail": {}})
    assert (event.id, event.from_status, event.to_status, event.at.year) == (5, "pending", "running", 2026)
    tool = record(Tool, {"name": "sleep", "kind": "python", "description": "Sleep.", "parameters": {"type": "object"},
                         "effect": "read", "idempotent": True, "timeout_s": 30.0, "max_attempts": 3,
                         "requires_approval": False})
    assert (tool.name, tool.definition, tool.requires_approval, tool.extra) == ("sleep", None, False, {})
    guarded = record(Tool, {**tool_body("guarded_write"), "requires_approval": True, "approval_timeout_s": 86400.0})
    assert (guarded.requires_approval, guarded.approval_timeout_s, guarded.extra) == (True, 86400.0, {})
    messages = [{"role": "tool", "tool_call_id": "call_1", "content": "4"}]
    batch = record(Batch, payloads.batch(status="completed", messages=messages, completed_at="2026-11-29T19:30:04Z"))
    assert (batch.receipts, batch.messages, batch.terminal) == (("rcpt_a", "rcpt_b"), messages, True)
    assert not record(Batch, payloads.batch()).terminal
    run = record(Run, payloads.run(status="success", output="4", iterations=2,
                                   steps=[{"index": 0, "kind": "model"}, {"index": 1, "kind": "tools"}]))
    assert (run.output, run.iterations, len(run.steps), run.terminal) == ("4", 2, 2, True)
    assert not record(Run, payloads.run(status="waiting")).terminal


def tool_body(name: str) -> dict[str, Any]:
    return {"name": name, "kind": "python", "description": "A write.", "parameters": {"type": "object"},
            "effect": "write", "idempotent": False, "timeout_s": 10.0, "max_attempts": 1}


def test_a_run_as_the_api_answers_it_has_every_field_as_an_attribute() -> None:
    run = record(Run, payloads.run(status="success", output="Written.", iterations=2,
                                   usage={"prompt_tokens": 31, "completion_tokens": 10},
                                   metadata={"ticket": "T-1"}, finished_at="2026-11-29T19:30:09Z",
                                   steps=payloads.run_steps(["rcpt_a", "rcpt_b"])))
    assert (run.tools, run.max_iterations, run.metadata, run.extra) == (("echo",), 8, {"ticket": "T-1"}, {})
    assert run.deadline_at == datetime(2026, 11, 29, 20, 30, 2, tzinfo=UTC)
    assert [step["kind"] for step in run.steps] == ["model", "tools", "model"]
    assert run.steps[0]["response"]["tool_calls"][1]["function"]["name"] == "guarded_write"
    assert run.receipt_ids == ("rcpt_a", "rcpt_b")
    assert (run.terminal, run.waiting) == (True, False)
    listed = payloads.run(status="waiting")
    del listed["steps"]  # GET /v1/runs lists runs without their steps
    waiting = record(Run, listed)
    assert (waiting.steps, waiting.receipt_ids, waiting.terminal, waiting.waiting) == ([], (), False, True)


def test_a_model_says_whether_a_key_is_set_never_the_key() -> None:
    model = record(Model, {"name": "local", "base_url": "http://127.0.0.1:11434/v1", "model": "qwen2.5",
                           "params": {"temperature": 0}, "api_key_set": True,
                           "created_at": "2026-11-29T19:30:02Z", "updated_at": "2026-11-29T19:30:02Z"})
    assert (model.model, model.api_key_set, model.extra) == ("qwen2.5", True, {})
    assert model.created_at == datetime(2026, 11, 29, 19, 30, 2, tzinfo=UTC)


def test_a_vendor_tools_array_is_returned_as_is() -> None:
    tools = [{"type": "function", "function": {"name": "echo", "description": "", "parameters": {}}}]
    assert responses.json_array(answer(200, tools)) == tools
    with pytest.raises(errors.UnexpectedResponse, match="array"):
        responses.json_array(answer(200, {"data": []}))


@pytest.mark.parametrize(("status", "cls"), [
    (401, errors.Unauthorized), (403, errors.Forbidden), (404, errors.NotFound), (409, errors.Conflict),
    (422, errors.InvalidRequest), (429, errors.RateLimited), (503, errors.Unavailable),
    (400, errors.ToolrelayError), (413, errors.ToolrelayError), (500, errors.ToolrelayError),
])
def test_each_error_status_raises_its_class_with_the_problem(status: int, cls: type[errors.ToolrelayError]) -> None:
    problem = payloads.problem(status, "Some Title", "what went wrong")
    with pytest.raises(cls) as caught:
        responses.json_body(answer(status, problem, headers={"content-type": "application/problem+json"}))
    assert type(caught.value) is cls
    assert (caught.value.status, caught.value.problem) == (status, problem)
    assert str(caught.value) == f"{status} Some Title: what went wrong"


def test_a_validation_error_names_its_fields() -> None:
    problem = payloads.problem(422, "Unprocessable Content", "arguments do not match the schema of 'sleep'",
                               errors=[{"field": "arguments.seconds", "message": "'long' is not of type 'number'"}])
    with pytest.raises(errors.InvalidRequest) as caught:
        responses.json_body(answer(422, problem))
    assert caught.value.errors == [{"field": "arguments.seconds", "message": "'long' is not of type 'number'"}]
    assert str(caught.value) == ("422 Unprocessable Content: arguments do not match the schema of 'sleep' "
                                 "(arguments.seconds: 'long' is not of type 'number')")


def test_retry_after_in_seconds_or_as_a_date() -> None:
    with pytest.raises(errors.RateLimited) as limited:
        responses.json_body(answer(429, payloads.problem(429, "Too Many Requests", "slow down"),
                                   headers={"Retry-After": "2"}))
    assert limited.value.retry_after == 2.0
    later = datetime.fromtimestamp(datetime.now(UTC).timestamp() + 120, UTC)
    with pytest.raises(errors.Unavailable) as down:
        responses.json_body(answer(503, payloads.problem(503, "Service Unavailable", "database down"),
                                   headers={"Retry-After": format_datetime(later, usegmt=True)}))
    assert down.value.retry_after is not None and 100 < down.value.retry_after <= 120
    assert errors.retry_after(None) is None and errors.retry_after("soon") is None


def test_an_error_without_a_problem_body_still_says_its_status() -> None:
    with pytest.raises(errors.ToolrelayError) as caught:
        responses.json_body(answer(502, content=b"<html>bad gateway</html>"))
    assert (caught.value.status, caught.value.problem, str(caught.value)) == (502, {}, "502 Bad Gateway")


def test_a_success_that_is_not_json_or_a_redirect_is_unexpected() -> None:
    with pytest.raises(errors.UnexpectedResponse, match="not JSON") as caught:
        responses.json_body(answer(200, content=b"<html>"))
    assert caught.value.status == 200
    with pytest.raises(errors.UnexpectedResponse, match="307"):
        responses.json_body(answer(307, headers={"Location": "/elsewhere"}))


def test_every_error_has_its_docstring_as_default_message() -> None:
    assert str(errors.NotFound()) == "No such resource for this API key's tenant."
    assert str(errors.ConnectionFailed()) == "The request got no answer from toolrelay."
    assert errors.NotFound().status is None and errors.NotFound().problem == {}
    assert issubclass(errors.ConnectionFailed, errors.Retryable)
    assert not issubclass(errors.NotFound, errors.Retryable)
