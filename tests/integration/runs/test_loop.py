"""Runs on a real deployment with a scripted Chat Completions server: the loop, its trace, its rails."""

from __future__ import annotations

import json
import time

from tests.integration.runs.conftest import Agent
from tests.support.model_server import call, fail, say


def test_the_loop_runs_the_tools_the_model_asks_for_and_ends_with_its_answer(agent: Agent) -> None:
    agent.script(call(("call_1", "calculate", {"expression": "6 * 7"}), ("call_2", "echo", {"note": "hi"})),
                 say("The answer is 42."))
    run = agent.run("What is six times seven?", tools=["calculate", "echo"], instructions="Be brief.")
    assert run["status"] == "success", run
    assert run["output"] == "The answer is 42."
    assert run["iterations"] == 2
    assert run["usage"] == {"prompt_tokens": 22, "completion_tokens": 14}
    assert [(s["index"], s["kind"]) for s in run["steps"]] == [(0, "model"), (1, "tools"), (2, "model")]
    model_step, tool_step, last = run["steps"]
    assert model_step["response"]["tool_calls"][0]["function"]["name"] == "calculate"
    assert model_step["request_messages"] == 2 and last["request_messages"] == 5
    assert model_step["latency_ms"] >= 0 and model_step["usage"] == {"prompt_tokens": 11, "completion_tokens": 7}
    assert [m["tool_call_id"] for m in tool_step["messages"]] == ["call_1", "call_2"]
    receipts = [agent.receipt(receipt_id) for receipt_id in tool_step["receipts"]]
    assert [r["tool"] for r in receipts] == ["calculate", "echo"]
    assert all(r["trace_id"] == run["trace_id"] and r["metadata"]["run_id"] == run["id"] for r in receipts)
    first, second = agent.models.requests_for(agent.model)
    assert first.messages == [{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": "What is six times seven?"}]
    assert {t["function"]["name"] for t in first.tools} == {"calculate", "echo"}
    assert first.body["temperature"] == 0
    assert first.authorization == "Bearer sk-test-secret"
    tool_messages = [m for m in second.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_1", "call_2"]
    assert tool_messages[0]["content"].startswith('{"result": 42}')


def test_a_tool_the_run_does_not_offer_gets_a_refusal_and_no_receipt(agent: Agent) -> None:
    agent.script(call(("c1", "sleep", {"seconds": 1}), ("c2", "echo", {"ok": True})), say("done"))
    run = agent.run(tools=["echo"])
    assert run["status"] == "success", run
    tools = run["steps"][1]
    assert len(tools["receipts"]) == 1 and agent.receipt(tools["receipts"][0])["tool"] == "echo"
    refusal, ok = tools["messages"]
    assert refusal["tool_call_id"] == "c1" and "not offered in this run" in refusal["content"]
    assert ok["tool_call_id"] == "c2"
    with agent.client() as client:
        assert client.get("/v1/receipts", params={"trace_id": run["trace_id"], "tool": "sleep"}).json()["data"] == []
    offered = agent.models.requests_for(agent.model)[0].tools
    assert [t["function"]["name"] for t in offered] == ["echo"]


def test_max_iterations_ends_a_run_that_never_answers(agent: Agent) -> None:
    agent.script(*[call((f"c{i}", "echo", {"i": i})) for i in range(3)])
    run = agent.run(tools=["echo"], max_iterations=3)
    assert run["status"] == "failed", run
    assert run["error"]["code"] == "max_iterations"
    assert run["iterations"] == 3 and len(agent.models.requests_for(agent.model)) == 3


def test_the_same_call_three_times_in_a_row_is_a_loop(agent: Agent) -> None:
    same = {"question": "again?"}
    agent.script(call(("c1", "echo", same)), call(("c2", "echo", same)), call(("c3", "echo", same)), say("never"))
    run = agent.run(tools=["echo"])
    assert run["status"] == "failed", run
    assert run["error"]["code"] == "loop_detected" and "echo" in run["error"]["message"]
    assert [s["kind"] for s in run["steps"]] == ["model", "tools", "model", "tools", "model"]  # the third not run


def test_a_rate_limit_and_a_server_error_are_retried_honouring_retry_after(agent: Agent) -> None:
    agent.script(fail(429, "slow down", **{"Retry-After": "1"}), fail(503, "overloaded"), say("fine"))
    run = agent.run()
    assert run["status"] == "success", run
    assert run["output"] == "fine" and run["iterations"] == 1
    assert len(agent.models.requests_for(agent.model)) == 3


def test_a_refusal_by_the_model_fails_the_run_with_its_message(agent: Agent) -> None:
    agent.script(fail(400, "the context window is exceeded"))
    run = agent.run()
    assert run["status"] == "failed", run
    assert run["error"]["code"] == "upstream_error"
    assert "the context window is exceeded" in run["error"]["message"]


def test_the_deadline_ends_a_run_whose_tools_run_too_long_and_cancels_them(agent: Agent) -> None:
    agent.script(call(("c1", "sleep", {"seconds": 30})))
    run = agent.run(tools=["sleep"], timeout_s=3)
    assert run["status"] == "failed", run
    assert run["error"]["code"] == "timeout"
    receipt = agent.receipt(run["steps"][1]["receipts"][0])
    assert receipt["status"] == "canceled"


def test_chat_messages_as_input_and_a_run_answer_at_once(agent: Agent) -> None:
    agent.script(say("Hello, Ana."))
    history = [{"role": "user", "content": "My name is Ana."}, {"role": "assistant", "content": "Noted."},
               {"role": "user", "content": "Greet me."}]
    response = agent.start(history, wait_s=20)
    assert response.status_code == 200, response.text
    run = response.json()
    assert run["status"] == "success" and run["output"] == "Hello, Ana."
    assert agent.models.requests_for(agent.model)[0].messages == history


def test_a_cancelled_run_cancels_its_open_tool_calls(agent: Agent) -> None:
    agent.script(call(("c1", "sleep", {"seconds": 30})))
    started = agent.start(tools=["sleep"], expect=202).json()
    waiting = agent.wait(started["id"], until={"running"})
    with agent.client() as client:
        deadline = time.monotonic() + 60
        while len((run := client.get(f"/v1/runs/{started['id']}").json())["steps"]) < 2:  # its tool call started
            assert time.monotonic() < deadline, run
            time.sleep(0.2)
        canceled = client.post(f"/v1/runs/{started['id']}/cancel")
        assert canceled.status_code == 200, canceled.text
        assert client.post(f"/v1/runs/{started['id']}/cancel").status_code == 409
    assert canceled.json()["status"] == "canceled"
    assert waiting["id"] == started["id"]
    assert agent.receipt(run["steps"][1]["receipts"][0])["status"] == "canceled"


def test_bad_input_is_refused_and_stores_nothing(agent: Agent) -> None:
    bad = [
        ({"model": "nope", "input": "x"}, "model"),
        ({"model": "scripted", "input": "x", "tools": ["echo", "no_such_tool"]}, "tools"),
        ({"model": "scripted", "input": "x", "max_iterations": 0}, "max_iterations"),
        ({"model": "scripted", "input": "x", "max_iterations": 51}, "max_iterations"),
        ({"model": "scripted", "input": "x", "timeout_s": -1}, "timeout_s"),
        ({"model": "scripted", "input": "x", "timeout_s": 10 ** 9}, "timeout_s"),
        ({"model": "scripted", "input": 42}, "input"),
        ({"model": "scripted", "input": [{"role": "wizard", "content": "x"}]}, "input.0.role"),
    ]
    with agent.client() as client:
        for body, field in bad:
            response = client.post("/v1/runs", json=body)
            assert response.status_code == 422, (body, response.text)
            fields = [e["field"] for e in response.json().get("errors", [])]
            assert any(f == field or f.startswith(field) for f in fields), (field, response.json())
        assert "no_such_tool" in client.post("/v1/runs", json=bad[1][0]).json()["detail"]
        assert client.get("/v1/runs").json()["data"] == []
    assert agent.models.requests_for(agent.model) == []


def test_the_model_api_key_is_never_shown(agent: Agent) -> None:
    with agent.client() as client:
        shown = client.get("/v1/models/scripted").json()
    assert shown["api_key_set"] is True and "sk-test-secret" not in json.dumps(shown)


def test_a_model_answer_postgresql_cannot_hold_is_stored_mended(agent: Agent) -> None:
    agent.script(say("done\x00 at last \ud83d"))  # a NUL and a lone surrogate: no text column holds them
    run = agent.run()
    assert run["status"] == "success", run
    assert run["output"] == "done\ufffd at last ?"
    agent.script(fail(400, "no \x00 here"))
    refused = agent.run()
    assert refused["status"] == "failed", refused
    assert "no \ufffd here" in refused["error"]["message"]
