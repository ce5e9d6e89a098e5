"""Credential headers of api_call tools: encrypted in the ``tools`` table, masked by the API, decrypted to send."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from receipts.catalogue import tools as catalogue
from receipts.db import Database
from receipts.records import ToolSpec
from receipts.store import calls
from tests.support import sql
from tests.support.upstreams import Reply, Upstream, serving
from tests.unit.kinds.conftest import Gateway, Worker, assert_problem, make_settings, running_gateway

TOKEN = "Bearer t0ken-4f9e2c"
API_KEY = "k3y-81d0aa"
USER = {"type": "object", "properties": {"user": {"type": "string"}}, "required": ["user"]}


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with serving() as running:
        yield running


def tool(url: str, headers: dict[str, str], name: str = "get_user") -> dict[str, Any]:
    return {"kind": "api_call", "name": name, "parameters": USER,
            "request": {"method": "GET", "url": url, "headers": headers}}


def credentials() -> dict[str, str]:
    return {"Authorization": TOKEN, "X-Api-Key": API_KEY, "Accept": "application/json"}


def stored(db: Database, name: str) -> tuple[str, dict[str, Any]]:
    """The ``tools.definition`` column as the database holds it (raw JSON text and parsed)."""
    [(raw, definition)] = sql.rows(db, "SELECT definition::text, definition FROM tools WHERE name = %(name)s",
                                   name=name)
    return raw, definition


def test_credential_headers_are_stored_encrypted_and_sent_decrypted(worker: Worker, upstream: Upstream,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    upstream.route("/users/ann", Reply(json={"ok": True}))
    worker.define(tool(upstream.url("/users/{user}"), credentials()))
    raw, definition = stored(worker.db, "get_user")
    assert "t0ken" not in raw and API_KEY not in raw
    assert definition["request"]["headers"] == {"Authorization": "********", "X-Api-Key": "********",
                                                "Accept": "application/json"}
    assert definition["sealed_headers"]
    with caplog.at_level(logging.DEBUG):
        receipt = worker.run("get_user", {"user": "ann"})
    assert receipt.status == "success", receipt.error
    [seen] = upstream.requests_to("/users/ann")
    assert seen.headers["authorization"] == TOKEN and seen.headers["x-api-key"] == API_KEY
    assert seen.headers["accept"] == "application/json" and seen.headers["idempotency-key"] == receipt.id
    assert "t0ken" not in caplog.text and API_KEY not in caplog.text
    events = worker.db.run(calls.events(worker.tenant, receipt.id))
    assert "t0ken" not in json.dumps([receipt.to_api(), *[event.to_api() for event in events]], default=str)


def test_a_definition_stored_with_plain_headers_still_works_and_is_masked(worker: Worker,
                                                                         upstream: Upstream) -> None:
    upstream.route("/users/ann", Reply(json={"ok": True}))
    legacy = {"request": {"method": "GET", "url": upstream.url("/users/{user}"), "headers": credentials(),
                          "timeout_s": 30.0, "follow_redirects": False}}
    worker.db.run(catalogue.publish([ToolSpec(name="old_tool", kind="api_call", description="", parameters=USER,
                                              definition=legacy, tenant_id=worker.tenant)]))
    receipt = worker.run("old_tool", {"user": "ann"})
    assert receipt.status == "success", receipt.error
    [seen] = upstream.requests_to("/users/ann")
    assert seen.headers["authorization"] == TOKEN and seen.headers["x-api-key"] == API_KEY
    shown = worker.db.run(catalogue.find(worker.tenant, "old_tool")).to_api()
    assert shown["definition"]["request"]["headers"]["Authorization"] == "********"
    assert "t0ken" not in json.dumps(shown)


def test_headers_without_credentials_need_no_secret_key_and_stay_readable(db: Database,
                                                                          upstream: Upstream) -> None:
    upstream.route("/users/ann", Reply(json={"ok": True}))
    keyless = Worker(db, make_settings(db, secret_key=""))
    keyless.define(tool(upstream.url("/users/{user}"), {"Accept": "application/json", "X-Trace": "on"}))
    _, definition = stored(db, "get_user")
    assert definition == {"request": {**definition["request"],
                                      "headers": {"Accept": "application/json", "X-Trace": "on"}}}
    assert keyless.run("get_user", {"user": "ann"}).status == "success"
    assert upstream.requests_to("/users/ann")[0].headers["x-trace"] == "on"


def test_a_worker_without_the_key_or_with_another_fails_the_call_before_sending(db: Database,
                                                                                upstream: Upstream) -> None:
    upstream.route("/users/ann", Reply(json={"ok": True}))
    Worker(db, make_settings(db)).define(tool(upstream.url("/users/{user}"), credentials()))
    for secret_key, hint in (("", "not set"), ("another-key", "changed")):
        other = Worker(db, make_settings(db, secret_key=secret_key))
        receipt = other.run("get_user", {"user": "ann"})
        assert receipt.status == "failed" and receipt.error["code"] == "tool_error", receipt.error
        assert receipt.error["retryable"] is False and hint in receipt.error["message"]
    assert upstream.seen == []


def test_the_api_masks_credentials_and_never_returns_their_ciphertext(gateway: Gateway) -> None:
    url = "https://93.184.215.14/users/{user}"
    created = gateway.post("/v1/tools", tool(url, credentials()))
    assert created.status_code == 201, created.text
    replaced = gateway.put("/v1/tools/get_user", tool(url, {**credentials(), "Cookie": "sid=c00kie"}))
    assert replaced.status_code == 200, replaced.text
    raw, definition = stored(gateway.db, "get_user")
    assert "t0ken" not in raw and API_KEY not in raw and "c00kie" not in raw
    responses = [created, replaced, gateway.get("/v1/tools/get_user"), gateway.get("/v1/tools")]
    for response in responses:
        assert "t0ken" not in response.text and API_KEY not in response.text and "c00kie" not in response.text
        assert "sealed_headers" not in response.text and definition["sealed_headers"] not in response.text
    assert gateway.get("/v1/tools/get_user").json()["definition"]["request"]["headers"] == {
        "Authorization": "********", "X-Api-Key": "********", "Accept": "application/json", "Cookie": "********"}


def test_the_mask_is_not_accepted_as_a_credential_value(gateway: Gateway) -> None:
    body = tool("https://93.184.215.14/users/{user}", {"Authorization": "********"})
    assert_problem(gateway.post("/v1/tools", body), 422, "request.headers.Authorization")
    assert gateway.get("/v1/tools/get_user").status_code == 404


@pytest.fixture
def keyless_gateway(db: Database) -> Iterator[Gateway]:
    """The real app with TOOLRELAY_SECRET_KEY unset."""
    with running_gateway(db, make_settings(db, secret_key="", outbound_allow_cidrs=[])) as running:
        yield running


def test_without_a_secret_key_credentials_are_refused_with_503_and_nothing_is_stored(
        keyless_gateway: Gateway) -> None:
    url = "https://93.184.215.14/users/{user}"
    body = assert_problem(keyless_gateway.post("/v1/tools", tool(url, credentials())), 503,
                          "request.headers.Authorization")
    assert "TOOLRELAY_SECRET_KEY" in body["detail"] and "t0ken" not in json.dumps(body)
    replaced = keyless_gateway.put("/v1/tools/get_user", tool(url, credentials()))
    assert_problem(replaced, 503, "request.headers.X-Api-Key")
    assert sql.rows(keyless_gateway.db, "SELECT name FROM tools WHERE tenant_id = %(tenant_id)s",
                    tenant_id=keyless_gateway.tenant_id) == []
    plain = keyless_gateway.post("/v1/tools", tool(url, {"Accept": "application/json"}))
    assert plain.status_code == 201, plain.text
