"""System tools on the real deployment: a tree of calls, tenant isolation, and the catalogue in every format."""

from __future__ import annotations

from tests.integration.kinds.conftest import define, run, submit
from tests.support.stack import Stack
from tests.support.upstreams import Upstream


def test_a_tree_of_calls_is_linked_and_listed_by_parent(stack: Stack) -> None:
    with stack.client() as client:
        nested = {"tool": "tool_calls_create", "arguments": {"tool": "echo", "arguments": {"leaf": True}}}
        root = run(stack, client, "tool_calls_create", nested, trace_id="trace_tree_1")
        assert root["status"] == "success", root
        child = root["output"]
        assert (child["parent_id"], child["tool"], child["trace_id"]) == (root["id"], "tool_calls_create",
                                                                         "trace_tree_1")
        child_done = stack.wait_terminal(child["id"])
        assert child_done["status"] == "success", child_done
        leaf = stack.wait_terminal(child_done["output"]["id"])
        assert (leaf["status"], leaf["output"], leaf["parent_id"]) == ("success", {"leaf": True}, child["id"])
        level1 = client.get("/v1/receipts", params={"parent_id": root["id"]}).json()["data"]
        level2 = client.get("/v1/receipts", params={"parent_id": child["id"]}).json()["data"]
        assert [r["id"] for r in level1] == [child["id"]] and [r["id"] for r in level2] == [leaf["id"]]
        whole = client.get("/v1/receipts", params={"trace_id": "trace_tree_1"}).json()["data"]
        assert {r["id"] for r in whole} == {root["id"], child["id"], leaf["id"]}
        listed = run(stack, client, "receipts_list", {"parent_id": root["id"]})
        assert [r["id"] for r in listed["output"]["data"]] == [child["id"]]


def test_a_system_call_cannot_reach_another_tenants_receipt(stack: Stack) -> None:
    with stack.client() as owner:
        mine = submit(owner, "echo", {"private": "data"})
        assert stack.wait_terminal(mine["id"])["status"] == "success"
        own = run(stack, owner, "receipts_get", {"receipt_id": mine["id"]})
        assert own["status"] == "success" and own["output"]["output"] == {"private": "data"}
    with stack.client(stack.other_key) as intruder:
        got = run(stack, intruder, "receipts_get", {"receipt_id": mine["id"]}, key=stack.other_key)
        assert got["status"] == "failed" and got["error"]["code"] == "not_found", got
        assert "private" not in str(got)
        listed = run(stack, intruder, "receipts_list", {"tool": "echo"}, key=stack.other_key)
        assert mine["id"] not in {r["id"] for r in listed["output"]["data"]}
        children = run(stack, intruder, "receipts_list", {"parent_id": mine["id"]}, key=stack.other_key)
        assert children["output"]["data"] == []
        assert intruder.get(f"/v1/receipts/{mine['id']}").status_code == 404


def test_the_catalogue_shows_every_kind_natively_and_for_openai_and_anthropic(stack: Stack,
                                                                              upstream: Upstream) -> None:
    with stack.client() as client:
        define(client, {"kind": "function", "name": "cat_function"})
        define(client, {"kind": "api_call", "name": "cat_api", "request": {"url": upstream.url("/x")}})
        define(client, {"kind": "integration", "name": "cat_wiki", "provider": "wikipedia", "method": "search"})
        native = {t["name"]: t for t in client.get("/v1/tools").json()["data"]}
        kinds = {native[name]["kind"] for name in ("cat_function", "cat_api", "cat_wiki", "echo", "tools_list")}
        assert kinds == {"function", "api_call", "integration", "python", "system"}
        for tool in native.values():
            assert {"kind", "parameters", "effect", "idempotent", "timeout_s"} <= set(tool)
        openai = client.get("/v1/tools", params={"format": "openai"}).json()
        anthropic = client.get("/v1/tools", params={"format": "anthropic"}).json()
        assert {t["function"]["name"] for t in openai} == set(native) == {t["name"] for t in anthropic}
        tools_list = run(stack, client, "tools_list")
        assert set(native) == {t["name"] for t in tools_list["output"]["data"]}
    with stack.client(stack.other_key) as other:
        assert "cat_api" not in {t["name"] for t in other.get("/v1/tools").json()["data"]}
