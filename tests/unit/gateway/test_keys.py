"""API keys with scopes, per endpoint: tools, read-only, revoked and expired keys.

Keys are made with the store's operations, as ``toolrelay keys create`` makes them (the CLI itself
is tested in tests/acceptance/test_keys.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from receipts import tenants
from receipts.db import Database
from tests.support import sql
from tests.unit.gateway.conftest import Gateway, assert_problem, running_gateway


@pytest.fixture
def gateway(db: Database) -> Iterator[Gateway]:
    with running_gateway(db, auth_cache_s=0, outbound_allow_cidrs=["127.0.0.0/8"]) as running:
        yield running


def key(gateway: Gateway, **scopes: Any) -> str:
    return gateway.db.run(tenants.create_key("acme", **scopes))


def call(gateway: Gateway, key_: str, tool: str = "echo", **arguments: Any) -> Any:
    return gateway.post_call({"tool": tool, "arguments": arguments}, key=key_)


def chat(*names: str) -> dict[str, Any]:
    return {"role": "assistant", "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps({"a": 1, "b": 2})}}
        for i, name in enumerate(names)]}


# -- tools scope ----------------------------------------------------------------------------------

def test_a_key_limited_to_tools_calls_those_and_gets_403_for_any_other(gateway: Gateway) -> None:
    limited = key(gateway, tools=["echo", "add"])
    assert call(gateway, limited, "echo", x=1).status_code == 202
    for tool in ("charge", "no_such_tool"):  # existing or not: outside the scope either way
        refused = call(gateway, limited, tool, cents=1)
        body = assert_problem(refused, 403)
        assert body["errors"] == [{"field": "tool", "message": "outside this API key's tools"}]
        assert "add, echo" in body["detail"]
    assert gateway.receipt_count() == 1


def test_a_key_limited_to_tools_lists_and_shows_only_those(gateway: Gateway) -> None:
    limited = key(gateway, tools=["echo", "add"])
    headers = gateway.headers(limited)
    native = gateway.client.get("/v1/tools", headers=headers).json()["data"]
    assert sorted(tool["name"] for tool in native) == ["add", "echo"]
    openai = gateway.client.get("/v1/tools", params={"format": "openai"}, headers=headers).json()
    assert sorted(tool["function"]["name"] for tool in openai) == ["add", "echo"]
    anthropic = gateway.client.get("/v1/tools", params={"format": "anthropic"}, headers=headers).json()
    assert sorted(tool["name"] for tool in anthropic) == ["add", "echo"]
    assert gateway.client.get("/v1/tools/add", headers=headers).status_code == 200
    assert_problem(gateway.client.get("/v1/tools/charge", headers=headers), 404)
    everything = gateway.client.get("/v1/tools", headers=gateway.headers()).json()["data"]
    assert {"echo", "add", "charge"} <= {tool["name"] for tool in everything}


def test_a_key_limited_to_tools_sees_only_their_receipts(gateway: Gateway) -> None:
    charge = gateway.post_call({"tool": "charge", "arguments": {"cents": 5}}).json()["id"]  # a full key's call
    limited = key(gateway, tools=["echo"])
    echo = call(gateway, limited, "echo", x=1).json()["id"]
    headers = gateway.headers(limited)
    listed = gateway.client.get("/v1/receipts", headers=headers).json()["data"]
    assert [r["id"] for r in listed] == [echo]
    assert gateway.client.get("/v1/receipts", params={"tool": "charge"}, headers=headers).json()["data"] == []
    assert gateway.client.get(f"/v1/receipts/{echo}", headers=headers).status_code == 200
    for path in (f"/v1/receipts/{charge}", f"/v1/receipts/{charge}/events"):
        assert_problem(gateway.client.get(path, headers=headers), 404)
    assert_problem(gateway.client.get(f"/v1/receipts/{charge}", params={"wait_s": 0.1}, headers=headers), 404)
    assert_problem(gateway.client.post(f"/v1/receipts/{charge}/cancel", headers=headers), 404)
    assert gateway.client.get(f"/v1/receipts/{charge}", headers=gateway.headers()).json()["status"] == "pending"
    full_list = gateway.client.get("/v1/receipts", headers=gateway.headers()).json()["data"]
    assert {r["id"] for r in full_list} == {echo, charge}


def test_a_batch_call_outside_the_scope_is_a_forbidden_receipt_that_names_only_the_keys_tools(
        gateway: Gateway) -> None:
    limited = key(gateway, tools=["add"])
    opened = gateway.client.post("/v1/batches", json={"format": "openai_chat", "message": chat("add", "charge"),
                                                      "wait_s": 0}, headers=gateway.headers(limited))
    assert opened.status_code == 202, opened.text
    add_id, charge_id = opened.json()["receipts"]
    receipts = {r[0]: r for r in sql.rows(gateway.db, "SELECT id, status, error FROM receipts")}
    assert receipts[add_id][1] == "pending"
    status, error = receipts[charge_id][1:]
    assert (status, error["code"]) == ("failed", "forbidden")
    assert error["details"] == {"tools": ["add"]}  # the model is told only of the key's tools
    assert "charge" in error["message"] and "echo" not in error["message"]
    assert gateway.sender.executes() == [add_id]


def test_a_key_limited_to_tools_reads_only_batches_of_its_tools(gateway: Gateway) -> None:
    def open_batch(key_: str | None, *names: str, **headers: str) -> Any:
        return gateway.client.post("/v1/batches", json={"format": "openai_chat", "message": chat(*names), "wait_s": 0},
                                   headers={**gateway.headers(key_), **headers})

    full = open_batch(None, "add", "charge", **{"Idempotency-Key": "step-1"})
    assert full.status_code == 202, full.text
    add_only, limited = key(gateway, tools=["add"]), key(gateway, tools=["charge"])
    own = open_batch(add_only, "add", "charge").json()["id"]  # its charge call is refused: still its batch
    for path in (f"/v1/batches/{own}", f"/v1/batches/{own}?wait_s=0.1"):
        assert gateway.client.get(path, headers=gateway.headers(add_only)).status_code == 202
    for key_ in (add_only, limited):  # the full key's batch ran a tool each key may not use
        assert_problem(gateway.client.get(f"/v1/batches/{full.json()['id']}", headers=gateway.headers(key_)), 404)
    assert_problem(open_batch(add_only, "add", "charge", **{"Idempotency-Key": "step-1"}), 404)  # nor by replay
    assert_problem(gateway.client.get(f"/v1/batches/{own}", headers=gateway.headers(limited)), 404)
    assert gateway.client.get(f"/v1/batches/{full.json()['id']}", headers=gateway.headers()).status_code == 202


def test_a_key_limited_to_tools_cannot_act_on_the_whole_tenant(gateway: Gateway) -> None:
    headers = gateway.headers(key(gateway, tools=["echo"]))
    definition = {"kind": "function", "name": "approve_refund", "description": "A person approves."}
    attempts = [
        gateway.client.post("/v1/tools", json=definition, headers=headers),
        gateway.client.put("/v1/tools/echo", json={**definition, "name": "echo"}, headers=headers),
        gateway.client.delete("/v1/tools/echo", headers=headers),
        gateway.client.get("/v1/webhook-endpoints", headers=headers),
        gateway.client.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/h"}, headers=headers),
        gateway.client.get("/v1/deliveries", headers=headers),
        gateway.client.post("/v1/webhook-secret", headers=headers),
        gateway.client.get("/v1/integrations", headers=headers),
    ]
    for response in attempts:
        assert_problem(response, 403)
    assert sql.value(gateway.db, "SELECT count(*) FROM webhook_endpoints") == 0
    assert sql.value(gateway.db, "SELECT count(*) FROM tools WHERE name = 'approve_refund'") == 0


# -- read-only ------------------------------------------------------------------------------------

def test_a_read_only_key_reads_everything_and_changes_nothing(gateway: Gateway) -> None:
    receipt_id = gateway.post_call({"tool": "echo", "arguments": {"x": 1}}).json()["id"]
    endpoint = gateway.client.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/h"},
                                   headers=gateway.headers()).json()["id"]
    headers = gateway.headers(key(gateway, read_only=True))
    for path in ("/v1/tools", "/v1/tools/echo", "/v1/receipts", f"/v1/receipts/{receipt_id}",
                 f"/v1/receipts/{receipt_id}/events", "/v1/webhook-endpoints", "/v1/deliveries"):
        assert gateway.client.get(path, headers=headers).status_code == 200, path
    refused = [
        gateway.client.post("/v1/tool-calls", json={"tool": "echo", "arguments": {}}, headers=headers),
        gateway.client.post("/v1/batches", json={"format": "openai_chat", "message": chat("add")}, headers=headers),
        gateway.client.post(f"/v1/receipts/{receipt_id}/cancel", headers=headers),
        gateway.client.post(f"/v1/receipts/{receipt_id}/result", json={"output": 1}, headers=headers),
        gateway.client.post("/v1/tools", json={"kind": "function", "name": "f"}, headers=headers),
        gateway.client.delete("/v1/tools/echo", headers=headers),
        gateway.client.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/h"}, headers=headers),
        gateway.client.patch(f"/v1/webhook-endpoints/{endpoint}", json={"enabled": False}, headers=headers),
        gateway.client.post(f"/v1/webhook-endpoints/{endpoint}/rotate-secret", headers=headers),
        gateway.client.post("/v1/webhook-secret", headers=headers),
    ]
    for response in refused:
        body = assert_problem(response, 403)
        assert "read-only" in body["detail"]
    assert gateway.receipt_count() == 1
    assert sql.value(gateway.db, "SELECT status FROM receipts") == "pending"
    assert sql.value(gateway.db, "SELECT count(*) FROM webhook_endpoints WHERE enabled") == 1


def test_a_read_only_key_limited_to_tools_has_both_limits(gateway: Gateway) -> None:
    headers = gateway.headers(key(gateway, tools=["echo"], read_only=True))
    assert [t["name"] for t in gateway.client.get("/v1/tools", headers=headers).json()["data"]] == ["echo"]
    assert_problem(gateway.client.post("/v1/tool-calls", json={"tool": "echo", "arguments": {}}, headers=headers), 403)


# -- revoked, expired, unknown ----------------------------------------------------------------------

def test_a_revoked_key_is_refused_with_401(gateway: Gateway) -> None:
    revocable = key(gateway)
    assert gateway.client.get("/v1/tools", headers=gateway.headers(revocable)).status_code == 200
    gateway.db.run(tenants.revoke(revocable))
    body = assert_problem(gateway.client.get("/v1/tools", headers=gateway.headers(revocable)), 401)
    assert body["detail"] == "this API key was revoked"
    assert_problem(call(gateway, revocable), 401)
    assert gateway.client.get("/v1/tools", headers=gateway.headers()).status_code == 200  # other keys go on


def test_an_unknown_or_missing_key_is_refused_with_401(gateway: Gateway) -> None:
    assert assert_problem(gateway.client.get("/v1/tools", headers=gateway.headers("trk_nope")), 401)["detail"] == (
        "invalid API key")
    response = gateway.client.get("/v1/tools")
    assert_problem(response, 401)
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_an_expiring_key_works_until_its_expiry_and_the_cache_never_serves_it_longer(db: Database) -> None:
    with running_gateway(db, auth_cache_s=600) as gateway:  # a cache far longer than the key's life
        expiring = gateway.db.run(tenants.create_key("acme", expires_in_s=3))
        assert gateway.client.get("/v1/tools", headers=gateway.headers(expiring)).status_code == 200
        while sql.value(db, "SELECT expires_at > now() FROM api_keys WHERE prefix = %(p)s", p=expiring[:8]):
            time.sleep(0.2)
        body = assert_problem(gateway.client.get("/v1/tools", headers=gateway.headers(expiring)), 401)
        assert body["detail"] == "this API key has expired"


def test_a_revoked_key_works_on_for_at_most_the_cache_period(db: Database) -> None:
    with running_gateway(db, auth_cache_s=600) as gateway:
        cached = gateway.db.run(tenants.create_key("acme"))
        assert gateway.client.get("/v1/tools", headers=gateway.headers(cached)).status_code == 200
        gateway.db.run(tenants.revoke(cached))
        # Within the cache period this process still trusts its lookup: that is what the setting bounds.
        assert gateway.client.get("/v1/tools", headers=gateway.headers(cached)).status_code == 200
        assert gateway.client.app.state.services.keys.ttl_s == 600  # type: ignore[attr-defined]


def test_last_use_is_recorded_at_most_once_a_minute(gateway: Gateway) -> None:
    used = key(gateway)
    prefix = used[:8]
    assert sql.value(gateway.db, "SELECT last_used_at FROM api_keys WHERE prefix = %(p)s", p=prefix) is None
    gateway.client.get("/v1/tools", headers=gateway.headers(used))
    first = sql.value(gateway.db, "SELECT last_used_at FROM api_keys WHERE prefix = %(p)s", p=prefix)
    assert first is not None
    for _ in range(3):  # every lookup reaches the database here (no cache), none writes again
        gateway.client.get("/v1/tools", headers=gateway.headers(used))
    assert sql.value(gateway.db, "SELECT last_used_at FROM api_keys WHERE prefix = %(p)s", p=prefix) == first
    sql.execute(gateway.db, "UPDATE api_keys SET last_used_at = now() - interval '2 minutes' WHERE prefix = %(p)s",
                p=prefix)
    gateway.client.get("/v1/tools", headers=gateway.headers(used))
    assert sql.value(gateway.db, "SELECT last_used_at > now() - interval '1 minute' FROM api_keys "
                                 "WHERE prefix = %(p)s", p=prefix)
