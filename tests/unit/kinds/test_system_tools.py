"""System tools: receipts_get, receipts_list, tool_calls_create, tools_list — inside the caller's tenant only."""

from __future__ import annotations

from typing import Any

from receipts import states
from receipts.messages import EXECUTE_TASK
from receipts.store import calls
from tests.support import sql
from tests.unit.kinds.conftest import Gateway, Worker, assert_problem


def test_receipts_get_returns_the_tenants_receipt(worker: Worker) -> None:
    worker.define({"kind": "function", "name": "approve"})
    target = worker.submit("approve")
    receipt = worker.run("receipts_get", {"receipt_id": target.id})
    assert receipt.status == "success", receipt.error
    assert receipt.output["id"] == target.id and receipt.output["status"] == "waiting"


def test_a_system_call_cannot_reach_another_tenants_receipt(worker: Worker) -> None:
    worker.define({"kind": "function", "name": "approve"}, tenant_id=worker.other_tenant)
    theirs = worker.submit("approve", tenant_id=worker.other_tenant)
    got = worker.run("receipts_get", {"receipt_id": theirs.id})
    unknown = worker.run("receipts_get", {"receipt_id": "rcpt_doesnotexist"})
    for receipt in (got, unknown):
        assert receipt.status == "failed" and receipt.error["code"] == "not_found"
        assert receipt.error["retryable"] is False
    assert got.error["message"] == f"no receipt {theirs.id}"  # same answer as for an unknown id
    listed = worker.run("receipts_list", {"tool": "approve"})
    assert listed.output == {"data": [], "next_cursor": None}
    by_parent = worker.run("receipts_list", {"parent_id": theirs.id})
    assert by_parent.output["data"] == []
    child = worker.run("tool_calls_create", {"tool": "approve", "arguments": {}})
    assert child.status == "failed" and child.error["code"] == "not_found"  # their tool is not ours


def test_receipts_list_filters_and_pages(worker: Worker) -> None:
    worker.define({"kind": "function", "name": "approve"})
    made = [worker.submit("approve", trace_id="trace_x") for _ in range(3)]
    first = worker.run("receipts_list", {"trace_id": "trace_x", "limit": 2})
    assert [r["id"] for r in first.output["data"]] == [made[2].id, made[1].id]
    rest = worker.run("receipts_list", {"trace_id": "trace_x", "cursor": first.output["next_cursor"]})
    assert [r["id"] for r in rest.output["data"]] == [made[0].id]
    bad = worker.run("receipts_list", {"cursor": "!!!"})
    assert bad.error["code"] == "invalid_arguments"


def test_tool_calls_create_makes_a_linked_child_and_publishes_it(worker: Worker) -> None:
    parent = worker.submit("tool_calls_create", {"tool": "receipts_get", "arguments": {"receipt_id": "rcpt_x"},
                                                 "metadata": {"why": "test"}}, trace_id="trace_tree")
    created = worker.execute(parent.id)
    assert created.status == "success", created.error
    child = created.output
    assert (child["parent_id"], child["trace_id"], child["tool"], child["status"]) == (
        parent.id, "trace_tree", "receipts_get", "pending")
    assert child["metadata"] == {"why": "test"}
    assert [m.args[0] for m in worker.sender.sent if m.name == EXECUTE_TASK] == [child["id"]]
    tree = worker.db.run(calls.list_receipts(worker.tenant, parent_id=parent.id))
    assert [r.id for r in tree.items] == [child["id"]]
    ran = worker.execute(child["id"])
    assert ran.status == "failed" and ran.error["code"] == "not_found"


def test_a_retried_tool_calls_create_finds_its_child_instead_of_making_another(worker: Worker) -> None:
    parent = worker.submit("tool_calls_create", {"tool": "tools_list"})
    first = worker.system.tool_calls_create(parent, {"tool": "tools_list"})
    again = worker.system.tool_calls_create(parent, {"tool": "tools_list"})
    assert first["id"] == again["id"]
    assert len(worker.db.run(calls.list_receipts(worker.tenant, parent_id=parent.id)).items) == 1


def test_tool_calls_create_validates_against_the_catalogue(worker: Worker) -> None:
    worker.define({"kind": "function", "name": "approve",
                   "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}})
    bad = worker.run("tool_calls_create", {"tool": "approve", "arguments": {"n": "one"}})
    assert bad.status == "failed" and bad.error["code"] == "invalid_arguments"
    assert bad.error["details"]["errors"][0]["field"] == "arguments.n"
    unknown = worker.run("tool_calls_create", {"tool": "no_such_tool"})
    assert unknown.error["code"] == "not_found"
    waiting = worker.run("tool_calls_create", {"tool": "approve", "arguments": {"n": 1}})
    assert waiting.output["status"] == states.WAITING and waiting.output["kind"] == "function"
    assert worker.sender.executes() == []  # a function child waits for its client, no worker runs it


def test_the_call_tree_depth_is_bounded(worker: Worker) -> None:
    parent = worker.submit("tools_list")
    for _ in range(worker.settings.max_call_depth - 1):
        parent = worker.submit("tools_list", parent_id=parent.id)
    deep = worker.submit("tool_calls_create", {"tool": "tools_list"}, parent_id=parent.id)
    refused = worker.execute(deep.id)
    assert refused.status == "failed" and "deeper than" in refused.error["message"]


def test_tools_list_shows_the_tenants_catalogue_with_credentials_masked(worker: Worker) -> None:
    worker.define({"kind": "api_call", "name": "secret_api",
                   "request": {"url": "http://127.0.0.1:9/x", "headers": {"Authorization": "Bearer hidden"}}})
    worker.define({"kind": "function", "name": "theirs"}, tenant_id=worker.other_tenant)
    listed = worker.run("tools_list")
    names = {tool["name"]: tool for tool in listed.output["data"]}
    assert {"receipts_get", "receipts_list", "tool_calls_create", "tools_list", "secret_api"} <= set(names)
    assert "theirs" not in names
    assert names["secret_api"]["definition"]["request"]["headers"]["Authorization"] == "********"
    assert "hidden" not in str(listed.output)


def test_tool_calls_create_refuses_what_post_tool_calls_refuses_with_the_same_errors(worker: Worker,
                                                                                     gateway: Gateway) -> None:
    """Both submit through one function (receipts.submission.prepare): same schema errors, same deadline limit."""
    worker.define({"kind": "function", "name": "approve",
                   "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1},
                                                                   "note": {"type": "string"}},
                                  "required": ["n"], "additionalProperties": False}})
    limit = worker.settings.function_deadline_max_s  # the gateway's too: both run on make_settings' defaults
    refused: list[dict[str, Any]] = [
        {"tool": "approve", "arguments": {"n": "one", "extra": 1}},
        {"tool": "approve", "arguments": {"note": 5}},
        {"tool": "approve", "arguments": {"n": 0}},
        {"tool": "approve", "arguments": {"n": 1}, "timeout_s": limit + 1},
        {"tool": "echo", "arguments": {}, "timeout_s": limit + 1},
    ]
    for body in refused:
        problem = assert_problem(gateway.post("/v1/tool-calls", body), 422)
        child = worker.run("tool_calls_create", body)
        assert child.status == "failed" and child.error["code"] == "invalid_arguments", body
        assert child.error["details"]["errors"] == problem["errors"], body
        assert child.error["message"] == problem["detail"], body
    assert sql.value(worker.db, "SELECT count(*) FROM receipts WHERE tool IN ('approve', 'echo')") == 0

    at_the_limit = {"tool": "approve", "arguments": {"n": 1}, "timeout_s": limit}
    accepted = gateway.post("/v1/tool-calls", at_the_limit)
    assert accepted.status_code == 202, accepted.text
    created = worker.run("tool_calls_create", at_the_limit)
    assert created.status == "success", created.error
    for receipt_id in (accepted.json()["id"], created.output["id"]):
        receipt = worker.db.run(calls.get(worker.tenant, receipt_id))
        assert receipt.status == states.WAITING
        assert abs((receipt.deadline_at - receipt.created_at).total_seconds() - limit) < 1
