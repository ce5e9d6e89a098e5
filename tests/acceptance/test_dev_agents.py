"""Agents on ``toolrelay dev``: runs against a scripted Chat Completions server on 127.0.0.1 (allow-listed
with TOOLRELAY_OUTBOUND_ALLOW_CIDRS, as a user would for a local model), approvals, batches, and a
dev killed with SIGKILL in the middle of a run.
"""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.conftest import wait_until
from tests.acceptance.test_dev import KEY, Dev, start_dev
from tests.support.model_server import ModelServer, call, model_server, say
from tests.support.receiver import Receiver
from tests.support.stack import ROOT, free_port
from tests.support.tools import count_effects

pytestmark = pytest.mark.acceptance

RUN_TERMINAL = {"success", "failed", "canceled"}


def dev_env(effects: Path) -> dict[str, str]:
    return {"TOOLRELAY_TOOL_MODULES": "tests.support.tools", "PYTHONPATH": str(ROOT),
            "TOOLRELAY_TEST_EFFECTS": str(effects), "TOOLRELAY_SWEEP_INTERVAL_S": "0.5",
            "TOOLRELAY_OUTBOUND_ALLOW_CIDRS": "127.0.0.0/8", "TOOLRELAY_MODEL_TIMEOUT_S": "10"}


@pytest.fixture(scope="module")
def models() -> Iterator[ModelServer]:
    with model_server() as server:
        yield server


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    tmp = tmp_path_factory.mktemp("dev-agents")
    running = start_dev(tmp, tmp / "data", free_port(), "--api-key", KEY, **dev_env(tmp / "effects"))
    try:
        yield running
    finally:
        running.process.kill(signal.SIGTERM)


def effects_of(dev: Dev) -> Path:
    return dev.data_dir.parent / "effects"


def define_model(dev: Dev, models: ModelServer) -> str:
    """Define the model ``local`` on the scripted server, under a backend name of its own; that name."""
    backend = f"model-{uuid.uuid4().hex[:10]}"
    with dev.client() as client:
        defined = client.put("/v1/models/local", json={"base_url": models.url, "model": backend})
    assert defined.status_code == 200, defined.text
    return backend


def start_run(dev: Dev, tools: list[str]) -> dict[str, Any]:
    with dev.client() as client:
        response = client.post("/v1/runs", json={"model": "local", "input": "Do the task.", "tools": tools})
    assert response.status_code == 202, response.text
    return response.json()  # type: ignore[no-any-return]


def wait_run(dev: Dev, run_id: str, until: set[str] = RUN_TERMINAL, timeout: float = 90) -> dict[str, Any]:
    """The run once its status is in ``until``; fails if dev exits or the time runs out first."""
    seen: dict[str, Any] = {}

    def reached() -> bool:
        with dev.client() as client:
            seen.update(client.get(f"/v1/runs/{run_id}", params={"wait_s": 5}).json())
        return seen["status"] in until

    wait_until(reached, timeout, f"run {run_id} to be {' or '.join(sorted(until))}", dev.process)
    return seen


def test_a_run_with_a_tool_call_ends_success(dev: Dev, models: ModelServer) -> None:
    backend = define_model(dev, models)
    models.script(backend, call(("c1", "calculate", {"expression": "2 ** 10"})), say("2 ** 10 is 1024."))
    run = wait_run(dev, start_run(dev, ["calculate"])["id"])
    assert (run["status"], run["output"], run["iterations"]) == ("success", "2 ** 10 is 1024.", 2), run
    assert [step["kind"] for step in run["steps"]] == ["model", "tools", "model"]
    (receipt_id,) = run["steps"][1]["receipts"]
    with dev.client() as client:
        receipt = client.get(f"/v1/receipts/{receipt_id}").json()
    assert (receipt["status"], receipt["output"], receipt["call_id"]) == ("success", {"result": 1024}, "c1")
    assert (receipt["trace_id"], receipt["metadata"]["run_id"]) == (run["trace_id"], run["id"])
    told = [m for m in models.requests_for(backend)[1].messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in told] == ["c1"] and "1024" in told[0]["content"]


def test_a_run_waits_for_an_approval_given_over_the_api_then_succeeds(dev: Dev, models: ModelServer) -> None:
    backend = define_model(dev, models)
    tag = f"dev-approved-{uuid.uuid4().hex[:8]}"
    models.script(backend, call(("c1", "guarded_write", {"tag": tag})), say("Written."))
    with Receiver() as receiver:
        with dev.client() as client:
            endpoint = client.post("/v1/webhook-endpoints", json={"url": receiver.url, "event_types": [
                "receipt.approval_requested", "run.waiting", "run.succeeded"]})
            assert endpoint.status_code == 201, endpoint.text
            receiver.secrets.append(endpoint.json()["secret"])
        started = start_run(dev, ["guarded_write"])
        waiting = wait_run(dev, started["id"], until={"waiting"} | RUN_TERMINAL)
        assert waiting["status"] == "waiting", waiting
        (receipt_id,) = waiting["steps"][-1]["receipts"]
        (asked,) = receiver.wait_for(1, type="receipt.approval_requested")
        (paused,) = receiver.wait_for(1, type="run.waiting")
        with dev.client() as client:
            receipt = client.get(f"/v1/receipts/{receipt_id}").json()
            assert (receipt["status"], receipt["approval"]["state"]) == ("waiting", "requested")
            assert count_effects(effects_of(dev), tag) == 0
            approved = client.post(f"/v1/receipts/{receipt_id}/approve", json={"by": "ana", "comment": "go"})
            assert approved.status_code == 200, approved.text
        run = wait_run(dev, started["id"])
        (succeeded,) = receiver.wait_for(1, type="run.succeeded")
    assert (run["status"], run["output"]) == ("success", "Written."), run
    assert count_effects(effects_of(dev), tag, "ran") == 1
    with dev.client() as client:
        done = client.get(f"/v1/receipts/{receipt_id}").json()
    assert (done["status"], done["approval"]["state"], done["approval"]["by"]) == ("success", "approved", "ana")
    assert (asked.payload["data"]["id"], asked.payload["data"]["approval"]["state"]) == (receipt_id, "requested")
    assert (paused.payload["data"]["id"], paused.payload["data"]["status"]) == (started["id"], "waiting")
    assert paused.payload["data"]["steps"][-1]["receipts"] == [receipt_id]
    assert (succeeded.payload["data"]["id"], succeeded.payload["data"]["output"]) == (started["id"], "Written.")
    assert all(hook.verified_by == (0,) for hook in (asked, paused, succeeded))


def test_a_batch_answers_200_with_its_messages(dev: Dev) -> None:
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "calculate", "arguments": '{"expression": "6 * 7"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "echo", "arguments": json.dumps({"say": "hi"})}},
        {"id": "call_c", "type": "function", "function": {"name": "no_such_tool", "arguments": "{}"}},
    ]}
    with dev.client() as client:
        response = client.post("/v1/batches", json={"format": "openai_chat", "message": message, "wait_s": 30})
    assert response.status_code == 200, response.text
    batch = response.json()
    assert batch["status"] == "completed" and len(batch["receipts"]) == 3
    messages = batch["messages"]
    assert [(m["role"], m["tool_call_id"]) for m in messages] == [("tool", "call_a"), ("tool", "call_b"),
                                                                 ("tool", "call_c")]
    assert messages[0]["content"].startswith('{"result": 42}')
    assert messages[1]["content"].startswith('{"say": "hi"}')
    assert messages[2]["content"].startswith("error: not_found:")


def test_a_dev_killed_mid_run_resumes_it_without_running_a_write_twice(tmp_path: Path, models: ModelServer) -> None:
    data_dir, effects, port = tmp_path / "data", tmp_path / "effects", free_port()
    write, read = f"w-{uuid.uuid4().hex[:6]}", f"r-{uuid.uuid4().hex[:6]}"
    first = start_dev(tmp_path, data_dir, port, "--api-key", KEY, name="dev-first", **dev_env(effects))
    try:
        backend = define_model(first, models)
        models.script(backend, call(("c1", "short_write", {"tag": write, "seconds": 4}),
                                    ("c2", "short_read", {"tag": read, "seconds": 4})),
                      say("Both done."))
        run_id = start_run(first, ["short_write", "short_read"])["id"]
        wait_until(lambda: count_effects(effects, write, "start") == 1 and count_effects(effects, read, "start") == 1,
                   60, "both tool calls to start", first.process)
    finally:
        first.process.kill(signal.SIGKILL)
    assert count_effects(effects, write, "done") == 0 and count_effects(effects, read, "done") == 0

    again = start_dev(tmp_path, data_dir, port, "--api-key", KEY, name="dev-again", **dev_env(effects))
    try:
        run = wait_run(again, run_id)
        with again.client() as client:
            receipts = {r["call_id"]: r for r in (client.get(f"/v1/receipts/{rid}").json()
                                                  for rid in run["steps"][1]["receipts"])}
    finally:
        again.process.kill(signal.SIGTERM)
    assert (run["status"], run["output"]) == ("success", "Both done."), run
    assert [step["kind"] for step in run["steps"]] == ["model", "tools", "model"]
    assert count_effects(effects, write, "start") == 1  # the non-idempotent write never ran again
    assert count_effects(effects, write, "done") == 0
    assert count_effects(effects, read, "start") == 2  # the read is safe to repeat: it ran again
    assert (receipts["c1"]["status"], receipts["c1"]["error"]["code"]) == ("failed", "outcome_unknown")
    assert (receipts["c2"]["status"], receipts["c2"]["attempt"]) == ("success", 2)
    requests = models.requests_for(backend)
    assert len(requests) == 2  # the stored first answer was not asked for again
    told = {m["tool_call_id"]: m["content"] for m in requests[1].messages if m["role"] == "tool"}
    assert told["c1"].startswith("error: outcome_unknown:")  # the model is told the write may have happened
    assert told["c2"].startswith(f'{{"tag": "{read}"}}')

