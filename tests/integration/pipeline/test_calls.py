"""Tool calls end to end on PostgreSQL, Redis and real Celery worker processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx

from receipts import tenants
from receipts.catalogue import tools
from receipts.store import calls
from receipts.store.calls import NewCall
from tests.integration.pipeline.conftest import effects, wait_until
from tests.support import sql
from tests.support.stack import Stack


def post(stack: Stack, tool: str, arguments: dict[str, Any], **fields: Any) -> dict[str, Any]:
    with stack.client() as client:
        response = client.post("/v1/tool-calls", json={"tool": tool, "arguments": arguments, **fields})
    assert response.status_code in (200, 202), response.text
    return response.json()  # type: ignore[no-any-return]


def seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def after_a_republish_interval(stack: Stack) -> None:
    """Return once the sweeper has re-sent a message a republish interval (3 s) old, and a worker ran it.

    A call stored without its message is what a lost message looks like: it runs only when a sweep
    finds it pending a republish interval after it was published, so its end is a sweep (and an
    execution) that came that long after this was called.
    """
    owner = stack.db.run(tenants.for_key(stack.api_key))
    assert owner is not None
    spec = stack.db.run(tools.find(owner.id, "echo"))
    canary, _ = stack.db.run(calls.create(NewCall(tenant_id=owner.id, tool=spec, deadline_s=120,
                                                  arguments={"canary": True})))
    final = stack.wait_terminal(canary.id, timeout=60)
    assert final["status"] == "success", stack.logs()
    assert seconds(final["created_at"], final["started_at"]) >= 3  # it waited for the sweep


def timeline(stack: Stack, receipt_id: str) -> list[tuple[str | None, str, int, str]]:
    with stack.client() as client:
        events = client.get(f"/v1/receipts/{receipt_id}/events").json()["data"]
    return [(e["from_status"], e["to_status"], e["attempt"], e["actor"]) for e in events]


def test_echo_returns_its_arguments(shared_stack: Stack) -> None:
    created = post(shared_stack, "echo", {"x": 1, "nested": {"list": [1, "two"]}})
    assert created["status"] == "pending"
    final = shared_stack.wait_terminal(created["id"])
    assert final["status"] == "success"
    assert final["output"] == {"x": 1, "nested": {"list": [1, "two"]}}
    assert final["attempt"] == 1
    steps = timeline(shared_stack, created["id"])
    assert [(a, b) for a, b, _, _ in steps] == [(None, "pending"), ("pending", "running"), ("running", "success")]
    assert steps[1][3].startswith("worker:")


def test_post_with_wait_s_returns_the_terminal_receipt(shared_stack: Stack) -> None:
    with shared_stack.client() as client:
        response = client.post("/v1/tool-calls", json={"tool": "calculate", "arguments": {"expression": "(2+3)*4"},
                                                       "wait_s": 20})
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "success"
    assert response.json()["output"] == {"result": 20}


def test_post_with_a_short_wait_s_returns_the_pending_receipt(shared_stack: Stack, tag: str) -> None:
    with shared_stack.client() as client:
        response = client.post("/v1/tool-calls", json={"tool": "slow_read", "arguments": {"tag": tag, "seconds": 3},
                                                       "wait_s": 0.5})
    assert response.status_code == 202
    assert response.json()["status"] in ("pending", "running")
    assert shared_stack.wait_terminal(response.json()["id"])["status"] == "success"


def test_long_poll_returns_as_soon_as_the_receipt_settles(shared_stack: Stack, tag: str) -> None:
    created = post(shared_stack, "slow_read", {"tag": tag, "seconds": 1})
    with shared_stack.client() as client:
        started = time.monotonic()
        response = client.get(f"/v1/receipts/{created['id']}", params={"wait_s": 60})
        elapsed = time.monotonic() - started
    assert response.json()["status"] == "success"
    assert elapsed < 30  # far from the 60 s it could have waited


def test_async_tool_runs(shared_stack: Stack) -> None:
    created = post(shared_stack, "async_add", {"a": 2, "b": 40})
    assert shared_stack.wait_terminal(created["id"])["output"] == {"sum": 42}


def test_tool_that_raises_fails_with_tool_error(shared_stack: Stack) -> None:
    created = post(shared_stack, "boom", {"message": "the printer is on fire"})
    final = shared_stack.wait_terminal(created["id"])
    assert final["status"] == "failed"
    assert final["error"]["code"] == "tool_error"
    assert final["error"]["message"] == "the printer is on fire"
    assert final["error"]["details"] == {"hint": "this tool always fails"}
    assert final["error"]["retryable"] is False
    assert final["attempt"] == 1


def test_unexpected_exception_in_a_read_is_retried_then_fails(shared_stack: Stack) -> None:
    created = post(shared_stack, "crash", {"message": "kaboom"})
    final = shared_stack.wait_terminal(created["id"])
    assert final["status"] == "failed"
    assert final["error"]["code"] == "tool_error"
    assert "RuntimeError: kaboom" in final["error"]["message"]
    assert final["attempt"] == 3


def test_sync_tool_past_its_timeout_fails_soon_after_the_limit(shared_stack: Stack) -> None:
    created = post(shared_stack, "hang", {"seconds": 15})
    final = shared_stack.wait_terminal(created["id"])
    assert final["status"] == "failed"
    assert final["error"]["code"] == "timeout"
    assert 1.0 <= seconds(final["started_at"], final["finished_at"]) < 3.5  # the limit is 1 s


def test_async_tool_past_its_timeout_fails_soon_after_the_limit(shared_stack: Stack) -> None:
    created = post(shared_stack, "async_hang", {"seconds": 15})
    final = shared_stack.wait_terminal(created["id"])
    assert final["status"] == "failed"
    assert final["error"]["code"] == "timeout"
    assert final["error"]["message"] == "the attempt did not finish within 1 s"
    assert 1.0 <= seconds(final["started_at"], final["finished_at"]) < 3.5


def test_the_call_deadline_bounds_the_attempt(shared_stack: Stack) -> None:
    created = post(shared_stack, "sleep", {"seconds": 20}, timeout_s=1.5)  # sleep's own timeout is an hour
    final = shared_stack.wait_terminal(created["id"])
    assert final["status"] == "failed"
    assert final["error"]["code"] == "timeout"
    assert seconds(final["created_at"], final["finished_at"]) < 4.5


def test_a_call_that_cannot_start_before_its_deadline_expires(shared_stack: Stack, tag: str) -> None:
    blockers = [f"{tag}b{i}" for i in range(2)]
    blocker_ids = [post(shared_stack, "slow_read", {"tag": b, "seconds": 4})["id"] for b in blockers]
    wait_until(lambda: all(effects(shared_stack.effects, b, "start") for b in blockers), 30, "both workers busy")
    late = post(shared_stack, "slow_read", {"tag": tag, "seconds": 0}, timeout_s=1)
    final = shared_stack.wait_terminal(late["id"])
    assert final["status"] == "failed"
    assert final["error"]["code"] == "expired"
    assert final["attempt"] == 0
    assert timeline(shared_stack, late["id"])[-1] == ("pending", "failed", 0, "sweeper")
    for rid in blocker_ids:
        shared_stack.wait_terminal(rid)
    after = post(shared_stack, "echo", {"after": tag})
    assert shared_stack.wait_terminal(after["id"])["status"] == "success"
    assert effects(shared_stack.effects, tag) == 0  # its message, delivered late, was dropped


def test_a_worker_keeps_working_after_tools_overrun_their_timeout(shared_stack: Stack) -> None:
    hung = [post(shared_stack, "hang", {"seconds": 10})["id"] for _ in range(3)]
    after = post(shared_stack, "echo", {"after": "hang"})
    assert shared_stack.wait_terminal(after["id"])["status"] == "success"
    assert all(shared_stack.wait_terminal(rid)["error"]["code"] == "timeout" for rid in hung)


def test_flaky_idempotent_tool_is_retried_to_success(shared_stack: Stack, tag: str) -> None:
    created = post(shared_stack, "flaky", {"tag": tag, "failures": 2})
    final = shared_stack.wait_terminal(created["id"])
    assert final["status"] == "success"
    assert final["output"] == {"calls": 3}
    assert final["attempt"] == 3
    assert effects(shared_stack.effects, tag, "call") == 3
    steps = [(a, b, n) for a, b, n, _ in timeline(shared_stack, created["id"])]
    assert steps == [
        (None, "pending", 0),
        ("pending", "running", 1), ("running", "pending", 1),
        ("pending", "running", 2), ("running", "pending", 2),
        ("pending", "running", 3), ("running", "success", 3),
    ]


def test_non_idempotent_write_with_a_retryable_error_is_not_retried(shared_stack: Stack, tag: str) -> None:
    created = post(shared_stack, "flaky_write", {"tag": tag})
    final = shared_stack.wait_terminal(created["id"])
    assert final["status"] == "failed"
    assert final["attempt"] == 1
    assert final["error"]["message"] == "transient failure"
    assert "not_retried" in final["error"]["details"]
    # Later sweeps must not run it again either.
    after_a_republish_interval(shared_stack)
    assert effects(shared_stack.effects, tag, "call") == 1


def test_arguments_are_checked_against_the_catalogue_before_anything_is_stored(shared_stack: Stack) -> None:
    with shared_stack.client() as client:
        before = client.get("/v1/receipts", params={"tool": "slow_write"}).json()["data"]
        response = client.post("/v1/tool-calls", json={"tool": "slow_write", "arguments": {"tag": 1}})
        after = client.get("/v1/receipts", params={"tool": "slow_write"}).json()["data"]
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert {e["field"] for e in response.json()["errors"]} == {"arguments", "arguments.tag"}
    assert before == after == []


def test_concurrent_duplicates_with_one_key_make_one_receipt(shared_stack: Stack) -> None:
    threads = 12
    barrier = threading.Barrier(threads)
    results: list[httpx.Response] = []
    lock = threading.Lock()

    def submit() -> None:
        with shared_stack.client() as client:
            barrier.wait()
            response = client.post("/v1/tool-calls", json={"tool": "echo", "arguments": {"n": 1}},
                                   headers={"Idempotency-Key": "dup-key-1"})
        with lock:
            results.append(response)

    workers = [threading.Thread(target=submit) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert len(results) == threads
    assert {r.json()["id"] for r in results} == {results[0].json()["id"]}
    fresh = [r for r in results if r.status_code == 202]
    replays = [r for r in results if r.status_code == 200]
    assert len(fresh) == 1 and len(replays) == threads - 1
    assert all(r.headers["idempotent-replayed"] == "true" for r in replays)
    assert sql.value(shared_stack.db, "SELECT count(*) FROM receipts WHERE idempotency_key = 'dup-key-1'") == 1
    assert shared_stack.wait_terminal(results[0].json()["id"])["status"] == "success"


def test_same_key_different_request_is_422(shared_stack: Stack) -> None:
    with shared_stack.client() as client:
        first = client.post("/v1/tool-calls", json={"tool": "echo", "arguments": {"n": 1}},
                            headers={"Idempotency-Key": "dup-key-2"})
        second = client.post("/v1/tool-calls", json={"tool": "echo", "arguments": {"n": 2}},
                             headers={"Idempotency-Key": "dup-key-2"})
    assert first.status_code == 202
    assert second.status_code == 422
    assert second.json()["errors"][0]["field"] == "idempotency_key"


def test_tenants_never_see_each_others_receipts(shared_stack: Stack) -> None:
    mine = post(shared_stack, "echo", {"secret": "mine"}, trace_id="trace_isolation")
    with shared_stack.client(shared_stack.other_key) as intruder:
        assert intruder.get(f"/v1/receipts/{mine['id']}").status_code == 404
        assert intruder.get(f"/v1/receipts/{mine['id']}", params={"wait_s": 1}).status_code == 404
        assert intruder.get(f"/v1/receipts/{mine['id']}/events").status_code == 404
        assert intruder.post(f"/v1/receipts/{mine['id']}/cancel").status_code == 404
        listed = intruder.get("/v1/receipts", params={"trace_id": "trace_isolation"}).json()
        assert listed["data"] == []
        theirs = intruder.post("/v1/tool-calls", json={"tool": "echo", "arguments": {"secret": "theirs"}}).json()
    with shared_stack.client() as client:
        assert client.get(f"/v1/receipts/{theirs['id']}").status_code == 404
    assert shared_stack.wait_terminal(mine["id"])["output"] == {"secret": "mine"}


def test_cancel_while_running_discards_the_result(shared_stack: Stack, tag: str) -> None:
    created = post(shared_stack, "slow_read", {"tag": tag, "seconds": 2})
    wait_until(lambda: effects(shared_stack.effects, tag, "start") == 1, 30, "the tool to start")
    with shared_stack.client() as client:
        response = client.post(f"/v1/receipts/{created['id']}/cancel")
        assert response.status_code == 200
        assert response.json()["status"] == "canceled"
        wait_until(lambda: effects(shared_stack.effects, tag, "done") == 1, 30, "the tool to finish")
        discarded = f"receipt {created['id']} attempt 1: result discarded"
        wait_until(lambda: discarded in worker_logs(shared_stack), 30, "the worker to report its late result")
        final = client.get(f"/v1/receipts/{created['id']}").json()
        assert final["status"] == "canceled"
        assert final["output"] is None
        assert final["error"]["code"] == "canceled"
        assert client.post(f"/v1/receipts/{created['id']}/cancel").status_code == 409


def worker_logs(stack: Stack) -> str:
    return "\n".join(p.log() for p in stack.processes if p.name.startswith("worker"))


def test_cancel_pending_means_it_never_runs(shared_stack: Stack, tag: str) -> None:
    # Occupy both worker processes, then queue one more call and cancel it before anyone claims it.
    blockers = [f"{tag}b{i}" for i in range(2)]
    blocker_ids = [post(shared_stack, "slow_read", {"tag": b, "seconds": 3})["id"] for b in blockers]
    wait_until(lambda: all(effects(shared_stack.effects, b, "start") for b in blockers), 30, "both workers busy")
    queued = post(shared_stack, "slow_read", {"tag": tag, "seconds": 0})
    with shared_stack.client() as client:
        response = client.post(f"/v1/receipts/{queued['id']}/cancel")
    assert response.status_code == 200
    assert response.json()["status"] == "canceled"
    for rid in blocker_ids:
        assert shared_stack.wait_terminal(rid)["status"] == "success"
    after = post(shared_stack, "echo", {"after": tag})
    assert shared_stack.wait_terminal(after["id"])["status"] == "success"
    assert shared_stack.wait_terminal(queued["id"])["status"] == "canceled"
    assert effects(shared_stack.effects, tag) == 0


def test_tools_published_by_the_worker_are_listed_with_schemas(shared_stack: Stack) -> None:
    with shared_stack.client() as client:
        native = client.get("/v1/tools").json()["data"]
        openai = client.get("/v1/tools", params={"format": "openai"}).json()
        anthropic = client.get("/v1/tools", params={"format": "anthropic"}).json()
        one = client.get("/v1/tools/slow_write").json()
    tools = {t["name"]: t for t in native}
    assert {"echo", "sleep", "calculate", "current_time", "slow_write", "flaky", "async_add"} <= set(tools)
    write = tools["slow_write"]
    assert (write["kind"], write["effect"], write["idempotent"], write["timeout_s"]) == ("python", "write", False, 30)
    assert write["description"].startswith("A non-idempotent write")
    assert set(write["parameters"]["properties"]) == {"tag", "seconds"}  # the ToolContext is not an argument
    assert write["parameters"]["properties"]["seconds"] == {"type": "number"}
    assert one == write
    assert tools["sleep"]["parameters"]["required"] == ["seconds"]
    assert tools["calculate"]["parameters"]["properties"]["expression"] == {"type": "string"}
    assert {t["function"]["name"] for t in openai} == set(tools)
    assert next(t for t in openai if t["function"]["name"] == "slow_write") == {
        "type": "function",
        "function": {"name": "slow_write", "description": write["description"], "parameters": write["parameters"]},
    }
    assert next(t for t in anthropic if t["name"] == "slow_write") == {
        "name": "slow_write", "description": write["description"], "input_schema": write["parameters"],
    }


def test_builtin_tools(shared_stack: Stack) -> None:
    calls = {
        "sleep": post(shared_stack, "sleep", {"seconds": 0.1}),
        "time": post(shared_stack, "current_time", {"timezone": "Europe/Paris"}),
        "bad_zone": post(shared_stack, "current_time", {"timezone": "Nowhere/Special"}),
        "div0": post(shared_stack, "calculate", {"expression": "1/0"}),
        "import": post(shared_stack, "calculate", {"expression": "__import__('os').getcwd()"}),
    }
    final = {name: shared_stack.wait_terminal(c["id"]) for name, c in calls.items()}
    assert final["sleep"]["output"] == {"slept": 0.1}
    assert final["time"]["output"]["timezone"] == "Europe/Paris"
    for name in ("bad_zone", "div0", "import"):
        assert final[name]["status"] == "failed"
        assert final[name]["error"]["code"] == "invalid_arguments"
        assert final[name]["attempt"] == 1


def test_readyz_checks_the_database_and_the_broker(shared_stack: Stack) -> None:
    response = httpx.get(f"{shared_stack.base_url}/readyz", timeout=10)
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "broker": "ok"}}
    assert httpx.get(f"{shared_stack.base_url}/healthz", timeout=10).json() == {"status": "ok"}


def test_oversized_bodies_are_refused_over_the_wire(shared_stack: Stack) -> None:
    blob = b'{"tool": "echo", "arguments": {"blob": "' + b"x" * (1024 * 1024 + 1) + b'"}}'

    def chunks() -> Iterator[bytes]:  # httpx sends a generator chunked, without Content-Length
        for start in range(0, len(blob), 65536):
            yield blob[start:start + 65536]

    with shared_stack.client() as client:
        sized = client.post("/v1/tool-calls", content=blob, headers={"Content-Type": "application/json"})
        chunked = client.post("/v1/tool-calls", content=chunks(), headers={"Content-Type": "application/json"})
        listed = client.get("/v1/receipts", params={"tool": "echo", "limit": 200}).json()["data"]
    assert sized.status_code == 413
    assert chunked.status_code == 413
    assert chunked.headers["content-type"].startswith("application/problem+json")
    assert not any("blob" in r["input"] for r in listed)


def test_malformed_json_and_missing_key_over_the_wire(shared_stack: Stack) -> None:
    with httpx.Client(base_url=shared_stack.base_url, timeout=10) as anonymous:
        assert anonymous.post("/v1/tool-calls", json={"tool": "echo", "arguments": {}}).status_code == 401
    with shared_stack.client() as client:
        bad = client.post("/v1/tool-calls", content=b"{nope", headers={"Content-Type": "application/json"})
        assert bad.status_code == 400
        assert bad.headers["content-type"].startswith("application/problem+json")
        assert client.get("/v1/receipts/rcpt_unknown").status_code == 404
