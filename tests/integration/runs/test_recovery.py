"""A run survives its worker's kill -9: it resumes from its last stored step and never runs a tool call twice."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from receipts.tenants import create_key
from tests.integration.runs.conftest import Agent
from tests.support.model_server import ModelServer, Turn, call, say
from tests.support.stack import Stack, running_stack
from tests.support.tools import count_effects


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def agent_on(stack: Stack, models: ModelServer) -> Agent:
    name = f"recovery-{uuid.uuid4().hex[:8]}"
    key = stack.db.run(create_key(name))
    model = f"model-{uuid.uuid4().hex[:8]}"
    with stack.client(key) as client:
        assert client.put("/v1/models/scripted", json={"base_url": models.url, "model": model}).status_code == 200
    return Agent(stack, models, key, model)


def kill_worker(stack: Stack) -> None:
    worker = next(p for p in stack.processes if p.name.startswith("worker") and p.popen.poll() is None)
    worker.kill(signal.SIGKILL)  # the whole process group: main process and pool children


def test_a_worker_killed_mid_tool_resumes_the_run_and_runs_no_call_twice(tmp_path: Path, models: ModelServer) -> None:
    with running_stack(tmp_path, outbound_allow_cidrs="127.0.0.0/8", model_timeout_s=10) as stack:
        agent = agent_on(stack, models)
        write, read = f"w-{uuid.uuid4().hex[:6]}", f"r-{uuid.uuid4().hex[:6]}"
        agent.script(call(("c1", "short_write", {"tag": write, "seconds": 4}),
                          ("c2", "short_read", {"tag": read, "seconds": 4})),
                     say("both done"))
        run_id = agent.start(tools=["short_write", "short_read"], expect=202).json()["id"]
        wait_until(lambda: count_effects(stack.effects, write, "start") == 1
                   and count_effects(stack.effects, read, "start") == 1, 30, "both tools to run")
        kill_worker(stack)
        stack.start_worker()  # beat's sweeper reclaims the calls' leases, then the batch completes
        run = agent.wait(run_id, timeout=90)
        assert run["status"] == "success", (run, stack.logs())
        assert run["output"] == "both done"
        assert count_effects(stack.effects, write, "start") == 1  # the non-idempotent write never ran again
        assert count_effects(stack.effects, read, "start") == 2  # the read is safe to repeat: it ran again
        requests = agent.models.requests_for(agent.model)
        assert len(requests) == 2  # each stored answer was asked for once
        told = {m["tool_call_id"]: m["content"] for m in requests[1].messages if m["role"] == "tool"}
        assert told["c1"].startswith("error: outcome_unknown:")  # the model is told the write may have happened
        assert told["c2"].startswith(f'{{"tag": "{read}"}}')


def test_a_worker_killed_while_the_model_answers_asks_again_only_for_that_turn(tmp_path: Path,
                                                                                models: ModelServer) -> None:
    with running_stack(tmp_path, outbound_allow_cidrs="127.0.0.0/8", model_timeout_s=4) as stack:
        agent = agent_on(stack, models)
        tag = f"once-{uuid.uuid4().hex[:6]}"
        agent.script(call(("c1", "short_write", {"tag": tag, "seconds": 0})),
                     Turn(content="lost with the worker", delay_s=3), say("finished"))
        run_id = agent.start(tools=["short_write"], expect=202).json()["id"]
        agent.models.wait_requests(agent.model, 2, timeout=30)  # the second turn is being answered
        kill_worker(stack)
        stack.start_worker()  # the run's lease runs out; the sweeper gives it back; it resumes
        run = agent.wait(run_id, timeout=90)
        assert run["status"] == "success", (run, stack.logs())
        assert run["output"] == "finished"
        assert [s["kind"] for s in run["steps"]] == ["model", "tools", "model"]
        assert len(agent.models.requests_for(agent.model)) == 3  # the first turn was never asked again
        assert count_effects(stack.effects, tag, "start") == 1
