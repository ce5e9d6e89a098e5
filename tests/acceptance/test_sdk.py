"""The Python SDK against a real deployment: gateway, Celery workers and beat on PostgreSQL and Redis.

One stack serves the module (tests keep apart by trace id, or a tenant of their own); every call
goes over HTTP through ``toolrelay.client`` as a user's program makes it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from receipts.tenants import create_key
from tests.support.model_server import ModelServer, Turn, call, model_server, say
from tests.support.receiver import Receiver
from tests.support.stack import Stack, free_port, running_stack
from tests.support.tools import count_effects
from toolrelay.client import (
    AsyncClient,
    Client,
    Conflict,
    ConnectionFailed,
    InvalidRequest,
    NotFound,
    Unauthorized,
    WaitTimeout,
    WebhookVerificationFailed,
    verify_webhook,
)

pytestmark = pytest.mark.acceptance


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One deployment for the module; loopback allow-listed so webhooks reach a local receiver."""
    with running_stack(tmp_path_factory.mktemp("sdk"), outbound_allow_cidrs="127.0.0.1/32") as running:
        yield running


@pytest.fixture
def client(stack: Stack) -> Iterator[Client]:
    with Client(stack.base_url, api_key=stack.api_key) as sdk:
        yield sdk


def trace() -> str:
    return f"trace_sdk_{uuid.uuid4().hex[:12]}"


class CountingTransport(httpx.HTTPTransport):
    """The real network transport, counting the requests it sends by path."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return super().handle_request(request)


def test_submit_then_wait_ends_in_success(client: Client) -> None:
    receipt = client.submit("calculate", {"expression": "(2 + 3) * 4"}, trace_id="trace_sdk_wait")
    assert receipt.status in ("pending", "running", "success") and receipt.tool == "calculate"
    done = client.wait(receipt.id, timeout=30)
    assert (done.id, done.status, done.output, done.error) == (receipt.id, "success", {"result": 20}, None)
    assert done.terminal and done.finished_at is not None and done.finished_at >= done.created_at
    assert client.get(receipt.id) == done


def test_wait_s_in_submit_answers_with_the_terminal_receipt(client: Client) -> None:
    receipt = client.submit("echo", {"n": 7}, wait_s=10)
    assert (receipt.status, receipt.output) == ("success", {"n": 7})


def test_a_failed_call_is_a_receipt_not_an_exception(client: Client) -> None:
    receipt = client.submit("calculate", {"expression": "1 / 0"}, wait_s=10)
    assert receipt.status == "failed"
    assert receipt.error is not None and receipt.error["code"] == "invalid_arguments"


def test_an_idempotent_replay_gives_the_same_receipt_and_a_changed_request_is_refused(client: Client) -> None:
    key = f"order-{uuid.uuid4().hex[:8]}"
    first = client.submit("echo", {"order": 1042}, idempotency_key=key)
    again = client.submit("echo", {"order": 1042}, idempotency_key=key)
    assert again.id == first.id and again.idempotency_key == key
    with pytest.raises(InvalidRequest) as refused:
        client.submit("echo", {"order": 9999}, idempotency_key=key)
    assert refused.value.status == 422
    assert [error["field"] for error in refused.value.errors] == ["idempotency_key"]
    assert refused.value.problem["type"] == "/problems/idempotency-key-reused"


def test_bad_arguments_are_invalid_request_naming_the_field(client: Client) -> None:
    with pytest.raises(InvalidRequest, match="arguments.seconds") as refused:
        client.submit("sleep", {"seconds": "long"})
    assert refused.value.errors[0]["field"] == "arguments.seconds"


def test_another_tenants_receipt_is_not_found(stack: Stack, client: Client) -> None:
    receipt = client.submit("echo", {"secret": "mine"})
    with Client(stack.base_url, api_key=stack.other_key) as intruder, pytest.raises(NotFound) as missing:
        intruder.get(receipt.id)
    assert missing.value.status == 404 and missing.value.problem["status"] == 404


def test_list_follows_every_page(stack: Stack) -> None:
    trace_id = trace()
    transport = CountingTransport()
    with Client(stack.base_url, api_key=stack.api_key, transport=transport) as client:
        submitted = {client.submit("echo", {"i": i}, trace_id=trace_id).id for i in range(7)}
        listed = [receipt.id for receipt in client.list(trace_id=trace_id, limit=3)]
    assert sorted(listed) == sorted(submitted) and len(listed) == 7
    assert listed == sorted(listed, reverse=True)  # newest first, ids are time-sortable
    assert transport.paths.count("/v1/receipts") == 3  # 3 + 3 + 1


def test_events_are_the_timeline(client: Client) -> None:
    receipt = client.wait(client.submit("echo", {"n": 1}).id, timeout=30)
    events = client.events(receipt.id)
    assert [(e.from_status, e.to_status) for e in events] == [(None, "pending"), ("pending", "running"),
                                                              ("running", "success")]
    assert events[0].actor == "api" and events[1].actor.startswith("worker:")
    assert [e.attempt for e in events] == [0, 1, 1]


def test_wait_times_out_then_cancel_ends_the_call_and_a_second_cancel_conflicts(client: Client) -> None:
    receipt = client.submit("sleep", {"seconds": 3})
    with pytest.raises(WaitTimeout, match=f"{receipt.id} is still") as late:
        client.wait(receipt.id, timeout=0.5)
    assert late.value.receipt.status in ("pending", "running")
    canceled = client.cancel(receipt.id)
    assert canceled.status == "canceled"
    assert canceled.error is not None and canceled.error["code"] == "canceled"
    with pytest.raises(Conflict) as conflict:
        client.cancel(receipt.id)
    assert conflict.value.status == 409
    assert client.wait(receipt.id, timeout=5).status == "canceled"


def test_a_function_tool_takes_the_clients_result(client: Client) -> None:
    name = f"approve_refund_{uuid.uuid4().hex[:6]}"
    tool = client.define_tool({"kind": "function", "name": name, "description": "A person approves a refund.",
                               "parameters": {"type": "object", "properties": {"amount": {"type": "integer"}},
                                              "required": ["amount"]}})
    assert (tool.name, tool.kind) == (name, "function")
    assert name in [t.name for t in client.tools()]
    receipt = client.submit(name, {"amount": 5}, wait_s=1)  # a client-run call does not wait for itself
    assert receipt.status == "waiting"
    done = client.submit_result(receipt.id, output={"approved": True})
    assert (done.status, done.output) == ("success", {"approved": True})
    with pytest.raises(Conflict):
        client.submit_result(receipt.id, output={"approved": False})
    refused = client.submit(name, {"amount": 500})
    failed = client.submit_result(refused.id, error="over the limit")
    assert failed.status == "failed" and failed.error is not None
    assert (failed.error["code"], failed.error["message"]) == ("tool_error", "over the limit")


def test_the_catalogue_in_a_vendors_format(client: Client) -> None:
    openai = client.tools("openai")
    assert any(entry["type"] == "function" and entry["function"]["name"] == "echo" for entry in openai)
    anthropic = client.tools("anthropic")
    assert any(entry["name"] == "calculate" and "input_schema" in entry for entry in anthropic)


def test_a_bad_key_is_unauthorized(stack: Stack) -> None:
    with Client(stack.base_url, api_key="trk_not_a_key") as stranger, pytest.raises(Unauthorized) as denied:
        stranger.submit("echo")
    assert denied.value.status == 401


def test_a_closed_port_is_connection_failed() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", api_key="trk_any", timeout=5) as nowhere, \
            pytest.raises(ConnectionFailed) as failed:
        nowhere.get("rcpt_1")
    assert isinstance(failed.value.__cause__, httpx.ConnectError)


def test_the_async_client_does_the_same(stack: Stack) -> None:
    async def scenario() -> dict[str, Any]:
        trace_id = trace()
        async with AsyncClient(stack.base_url, api_key=stack.api_key) as client:
            submitted = [await client.submit("echo", {"i": i}, trace_id=trace_id) for i in range(4)]
            waited = await client.wait(submitted[0].id, timeout=30)
            settled = await client.submit("calculate", {"expression": "6 * 7"}, trace_id=trace_id, wait_s=10)
            listed = [receipt.id async for receipt in client.list(trace_id=trace_id, limit=2)]
            events = await client.events(waited.id)
            sleeping = await client.submit("sleep", {"seconds": 3})
            canceled = await client.cancel(sleeping.id)
            try:
                await client.cancel(sleeping.id)
            except Conflict as conflict:
                second_cancel = conflict.status
            async with AsyncClient(stack.base_url, api_key=stack.other_key) as intruder:
                try:
                    await intruder.get(waited.id)
                except NotFound as missing:
                    intruder_status = missing.status
        return {"submitted": {r.id for r in submitted} | {settled.id}, "waited": waited, "settled": settled,
                "listed": listed, "events": [e.to_status for e in events], "canceled": canceled.status,
                "second_cancel": second_cancel, "intruder": intruder_status}

    seen = asyncio.run(scenario())
    assert (seen["waited"].status, seen["waited"].output) == ("success", {"i": 0})
    assert (seen["settled"].status, seen["settled"].output) == ("success", {"result": 42})
    assert sorted(seen["listed"]) == sorted(seen["submitted"]) and len(seen["listed"]) == 5
    assert seen["events"] == ["pending", "running", "success"]
    assert (seen["canceled"], seen["second_cancel"], seen["intruder"]) == ("canceled", 409, 404)


def test_verify_webhook_accepts_a_real_delivery_and_refuses_a_tampered_body(stack: Stack) -> None:
    key = stack.db.run(create_key(f"sdk-hooks-{uuid.uuid4().hex[:8]}"))  # its own endpoints and messages
    with Receiver() as receiver, stack.client(key) as http, Client(stack.base_url, api_key=key) as client:
        endpoint = http.post("/v1/webhook-endpoints", json={"url": receiver.url, "event_types": ["receipt.succeeded"]})
        assert endpoint.status_code == 201, endpoint.text
        secret = endpoint.json()["secret"]
        receipt = client.submit("echo", {"hook": True}, wait_s=10)
        [delivery] = receiver.wait_for(1, type="receipt.succeeded")
    payload = verify_webhook(secret, delivery.headers, delivery.body)  # signed by the dispatcher
    assert payload["type"] == "receipt.succeeded"
    assert (payload["data"]["id"], payload["data"]["status"]) == (receipt.id, "success")
    tampered = delivery.body.replace(b'"success"', b'"failed"')
    assert tampered != delivery.body
    with pytest.raises(WebhookVerificationFailed):
        verify_webhook(secret, delivery.headers, tampered)
    with pytest.raises(WebhookVerificationFailed):
        verify_webhook("whsec_" + "A" * 43, delivery.headers, delivery.body)  # another secret


# -- runs and approvals, against a scripted Chat Completions server on 127.0.0.1 -----------------

@pytest.fixture(scope="module")
def models() -> Iterator[ModelServer]:
    with model_server() as server:
        yield server


@dataclass(frozen=True)
class Agent:
    """A tenant of its own: its key, a client with it, and the scripted backend its model ``local`` uses."""

    key: str
    client: Client
    backend: str


@pytest.fixture
def agent(stack: Stack, models: ModelServer) -> Iterator[Agent]:
    key = stack.db.run(create_key(f"sdk-runs-{uuid.uuid4().hex[:8]}"))
    backend = f"model-{uuid.uuid4().hex[:10]}"
    with Client(stack.base_url, api_key=key) as client:
        model = client.define_model("local", base_url=models.url, model=backend, params={"temperature": 0})
        assert (model.name, model.model, model.params, model.api_key_set) == ("local", backend, {"temperature": 0},
                                                                              False)
        yield Agent(key, client, backend)


def test_a_run_with_a_tool_call_from_start_to_answer(agent: Agent, models: ModelServer) -> None:
    client, backend = agent.client, agent.backend
    models.script(backend, call(("c1", "calculate", {"expression": "6 * 7"})), say("6 * 7 is 42."))
    run = client.run("local", "What is 6 * 7?", ["calculate"], instructions="Use the tools.", wait_s=30,
                     metadata={"ticket": "T-1"})
    if not run.terminal:
        run = client.wait_run(run.id, timeout=60)
    assert (run.status, run.output, run.iterations, run.error) == ("success", "6 * 7 is 42.", 2, None)
    assert (run.tools, run.max_iterations, run.metadata) == (("calculate",), 8, {"ticket": "T-1"})
    assert [step["kind"] for step in run.steps] == ["model", "tools", "model"]
    assert run.usage == {"prompt_tokens": 22, "completion_tokens": 14}
    (receipt_id,) = run.receipt_ids
    receipt = client.get(receipt_id)
    assert (receipt.status, receipt.output, receipt.trace_id) == ("success", {"result": 42}, run.trace_id)
    assert receipt.metadata["run_id"] == run.id
    assert client.get_run(run.id) == run
    (listed,) = client.list_runs(trace_id=run.trace_id)
    assert (listed.id, listed.status, listed.steps) == (run.id, "success", [])  # a listing has no steps
    assert models.requests_for(backend)[0].messages[0] == {"role": "system", "content": "Use the tools."}


def test_wait_run_times_out_on_a_run_still_running(agent: Agent, models: ModelServer) -> None:
    client, backend = agent.client, agent.backend
    models.script(backend, Turn(content="late", delay_s=3))
    run = client.run("local", "Take your time.", [])
    with pytest.raises(WaitTimeout, match=f"{run.id} is still") as late:
        client.wait_run(run.id, timeout=0.5)
    assert late.value.run is not None and late.value.run.status in ("pending", "running")
    assert client.wait_run(run.id, timeout=60).output == "late"


def test_a_run_waits_for_an_approval_and_goes_on_once_approved(stack: Stack, agent: Agent,
                                                                models: ModelServer) -> None:
    client, backend = agent.client, agent.backend
    tag = f"sdk-approved-{uuid.uuid4().hex[:8]}"
    models.script(backend, call(("c1", "guarded_write", {"tag": tag})), say("Written."))
    run = client.wait_run(client.run("local", "Write it.", ["guarded_write"]).id, timeout=60)
    assert run.waiting and not run.terminal
    (asking,) = client.list(trace_id=run.trace_id, status="waiting")
    assert asking.id == run.receipt_ids[0] and asking.approval is not None
    assert asking.approval["state"] == "requested" and asking.approval["expires_at"] > asking.approval["requested_at"]
    assert count_effects(stack.effects, tag) == 0

    approved = client.approve(asking.id, "ana", comment="ok to go")
    assert approved.status == "pending" and approved.approval is not None
    assert (approved.approval["state"], approved.approval["by"], approved.approval["comment"]) == (
        "approved", "ana", "ok to go")
    with pytest.raises(Conflict, match="already approved by ana"):
        client.approve(asking.id, "bo")
    run = client.wait_run(run.id, timeout=60)
    assert (run.status, run.output) == ("success", "Written.")
    assert client.get(asking.id).status == "success"
    assert count_effects(stack.effects, tag, "ran") == 1


def test_a_call_waiting_for_approval_is_rejected_and_never_runs(stack: Stack, agent: Agent) -> None:
    client = agent.client
    tag = f"sdk-rejected-{uuid.uuid4().hex[:8]}"
    (tool,) = [t for t in client.tools() if t.name == "guarded_write"]
    assert tool.requires_approval and not tool.idempotent
    receipt = client.submit("guarded_write", {"tag": tag}, wait_s=1)  # waits for a person, not for wait_s
    assert receipt.status == "waiting" and receipt.approval is not None and receipt.approval["state"] == "requested"
    rejected = client.reject(receipt.id, "bo", reason="not today")
    assert rejected.status == "failed" and rejected.error is not None and rejected.approval is not None
    assert (rejected.error["code"], rejected.error["message"]) == ("rejected", "rejected by bo: not today")
    assert (rejected.approval["state"], rejected.approval["by"], rejected.approval["reason"]) == (
        "rejected", "bo", "not today")
    with pytest.raises(Conflict):
        client.reject(receipt.id, "bo")
    decision = client.events(receipt.id)[-1]
    assert (decision.from_status, decision.to_status, decision.actor) == ("waiting", "failed", "person:bo")
    assert count_effects(stack.effects, tag) == 0


def test_the_async_client_runs_and_approves_too(stack: Stack, agent: Agent, models: ModelServer) -> None:
    tag = f"sdk-async-{uuid.uuid4().hex[:8]}"
    models.script(agent.backend, call(("c1", "guarded_write", {"tag": tag})), say("Done."))

    async def scenario() -> tuple[str, str, str]:
        async with AsyncClient(stack.base_url, api_key=agent.key) as sdk:
            run = await sdk.wait_run((await sdk.run("local", "Write it.", ["guarded_write"])).id, timeout=60)
            waited = run.status
            approved = await sdk.approve(run.receipt_ids[0], "ana")
            run = await sdk.wait_run(run.id, timeout=60)
            return waited, approved.status, run.status

    assert asyncio.run(scenario()) == ("waiting", "pending", "success")
    assert count_effects(stack.effects, tag, "ran") == 1
