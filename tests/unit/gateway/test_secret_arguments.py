"""Secrets in arguments: the tool gets them, every surface of the API shows the mask.

The gateway runs in process; a real Executor plays the worker, with a tool that records what it got.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pydantic import BaseModel, SecretStr

from gateway.schemas import BatchRequest
from receipts.catalogue import tools as catalogue
from receipts.db import Database
from receipts.secret_arguments import MASK
from receipts.store.calls import fingerprint
from receipts.telemetry.calls import CallMetrics, CallObserver
from tests.support import sql
from tests.unit.gateway.conftest import Gateway, assert_problem, running_gateway
from workers.backoff import Backoff
from workers.errors import ToolError
from workers.execution import Executor, PythonKind
from workers.registry import MARK, Registry, tool

PASSWORD = "hunter2-correct-horse"
TOKEN = "tok-9f8e7d6c5b4a"
CARD = "4242424242424242"
SECRETS = (PASSWORD, TOKEN, CARD)
RECEIVED: list[dict[str, Any]] = []


class Account(BaseModel):
    region: str
    token: SecretStr


class Card(BaseModel):
    holder: str
    number: SecretStr


@tool(effect="write", idempotent=True)
def login(user: str, password: SecretStr, account: Account, cards: list[Card] | None = None,
          fail: bool = False) -> dict[str, Any]:
    """Logs in (a test tool that records the arguments it really got)."""
    got = {"user": user, "password": password.get_secret_value(), "token": account.token.get_secret_value(),
           "cards": [card.number.get_secret_value() for card in cards or []]}
    RECEIVED.append(got)
    if fail:
        raise ToolError(f"login refused for {user} with password {got['password']}")
    return {"user": user, "echo": got["password"], "note": f"token {got['token']} accepted"}


REGISTRY = Registry([getattr(login, MARK)])
ARGUMENTS = {"user": "ada", "password": PASSWORD, "account": {"region": "eu", "token": TOKEN},
             "cards": [{"holder": "Ada", "number": CARD}]}
MASKED = {"user": "ada", "password": MASK, "account": {"region": "eu", "token": MASK},
          "cards": [{"holder": "Ada", "number": MASK}]}


@pytest.fixture(autouse=True)
def _received() -> Iterator[None]:
    RECEIVED.clear()
    yield
    RECEIVED.clear()


@pytest.fixture
def gateway(db: Database) -> Iterator[Gateway]:
    with running_gateway(db, outbound_allow_cidrs=["127.0.0.0/8"]) as running:
        db.run(catalogue.publish(REGISTRY.specs()))
        yield running


def executor(gateway: Gateway) -> Executor:
    return Executor(gateway.db, {"python": PythonKind(REGISTRY)}, gateway.sender,
                    backoff=Backoff(initial=0.2, jitter=0), lease_grace_s=1.0, secret_key="unit-test-secret")


def subscribe(gateway: Gateway) -> None:
    created = gateway.client.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/hooks"},
                                  headers=gateway.headers())
    assert created.status_code == 201, created.text


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} leaked in {text[:300]}"


def everything_stored(db: Database) -> str:
    """Every row of every table the API, the console and webhooks read, as text (not secret_input)."""
    parts = [json.dumps(sql.rows(db, f"SELECT to_jsonb(t) - 'secret_input' FROM {table} t"), default=str)
             for table in ("receipts", "receipt_events", "webhook_messages", "webhook_attempts", "batches")]
    return "\n".join(parts)


def test_the_tool_gets_the_secrets_and_every_surface_shows_the_mask(gateway: Gateway,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    subscribe(gateway)
    accepted = gateway.post_call({"tool": "login", "arguments": ARGUMENTS})
    assert accepted.status_code == 202, accepted.text
    receipt_id = accepted.json()["id"]
    assert accepted.json()["input"] == MASKED
    stored_input, ciphertext = sql.one(gateway.db, "SELECT input, secret_input FROM receipts WHERE id = %(id)s",
                                       id=receipt_id) or (None, None)
    assert stored_input == MASKED  # the stored input itself holds the mask
    assert isinstance(ciphertext, str) and ciphertext
    assert_no_secret(ciphertext)  # encrypted, not encoded

    with caplog.at_level(logging.DEBUG):
        done = executor(gateway).execute(receipt_id, 30)
    assert done is not None and done.status == "success"
    assert RECEIVED == [{"user": "ada", "password": PASSWORD, "token": TOKEN, "cards": [CARD]}]
    # What the tool returned repeats two secrets: the receipt keeps the mask instead.
    assert done.output == {"user": "ada", "echo": MASK, "note": f"token {MASK} accepted"}

    receipt = gateway.client.get(f"/v1/receipts/{receipt_id}", headers=gateway.headers())
    listed = gateway.client.get("/v1/receipts", headers=gateway.headers())
    events = gateway.client.get(f"/v1/receipts/{receipt_id}/events", headers=gateway.headers())
    deliveries = gateway.client.get("/v1/deliveries", params={"receipt_id": receipt_id}, headers=gateway.headers())
    assert receipt.json()["input"] == MASKED and listed.json()["data"][0]["input"] == MASKED
    assert {d["event_type"] for d in deliveries.json()["data"]} >= {"receipt.running", "receipt.succeeded"}
    payloads = sql.rows(gateway.db, "SELECT payload FROM webhook_messages WHERE receipt_id = %(id)s", id=receipt_id)
    assert payloads and all(payload["data"]["input"] == MASKED for (payload,) in payloads)
    assert_no_secret(receipt.text, listed.text, events.text, deliveries.text, everything_stored(gateway.db),
                     caplog.text)


def test_an_error_that_repeats_a_secret_is_masked_in_the_receipt_and_the_logs(
        gateway: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    accepted = gateway.post_call({"tool": "login", "arguments": {**ARGUMENTS, "fail": True}})
    gateway.db.subscribe(CallObserver(CallMetrics(CollectorRegistry())))  # a worker's end line for each call
    with caplog.at_level(logging.DEBUG):
        done = executor(gateway).execute(accepted.json()["id"], 30)
    assert done is not None and done.status == "failed"
    assert RECEIVED[0]["password"] == PASSWORD
    assert done.error is not None and done.error["message"] == f"login refused for ada with password {MASK}"
    events = gateway.client.get(f"/v1/receipts/{done.id}/events", headers=gateway.headers())
    assert_no_secret(events.text, everything_stored(gateway.db), caplog.text)
    assert f"receipt {done.id} login failed (tool_error)" in caplog.text


def test_a_schema_error_about_a_secret_does_not_repeat_it(gateway: Gateway) -> None:
    response = gateway.post_call({"tool": "login", "arguments": {**ARGUMENTS, "password": {"nested": PASSWORD},
                                                                 "account": {"region": "eu", "token": 42424242}}})
    body = assert_problem(response, 422)
    assert {error["field"] for error in body["errors"]} == {"arguments.password", "arguments.account.token"}
    assert_no_secret(response.text)
    assert "42424242" not in response.text
    assert gateway.receipt_count() == 0


def test_a_secret_cannot_be_submitted_without_the_secret_key(db: Database) -> None:
    with running_gateway(db, secret_key="") as gateway:
        db.run(catalogue.publish(REGISTRY.specs()))
        refused = gateway.post_call({"tool": "login", "arguments": ARGUMENTS})
        assert_problem(refused, 503)
        assert "TOOLRELAY_SECRET_KEY" in refused.json()["detail"]
        assert gateway.receipt_count() == 0
        # A call to a tool with secrets in its schema but none in its arguments needs no key.
        echo = gateway.post_call({"tool": "echo", "arguments": {"password": "not declared secret here"}})
        assert echo.status_code == 202


def test_a_replay_with_the_same_secret_is_the_same_call_and_another_secret_is_a_mismatch(gateway: Gateway) -> None:
    first = gateway.post_call({"tool": "login", "arguments": ARGUMENTS, "idempotency_key": "login-1"})
    again = gateway.post_call({"tool": "login", "arguments": ARGUMENTS, "idempotency_key": "login-1"})
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.headers["idempotent-replayed"] == "true" and again.json()["id"] == first.json()["id"]
    other = gateway.post_call({"tool": "login", "arguments": {**ARGUMENTS, "password": "another-password"},
                               "idempotency_key": "login-1"})
    assert_problem(other, 422)
    assert gateway.receipt_count() == 1
    request_hash = sql.value(gateway.db, "SELECT request_hash FROM receipts")
    assert_no_secret(request_hash)


def test_batches_mask_secrets_in_receipts_and_in_the_messages_for_the_model(gateway: Gateway) -> None:
    message = {"role": "assistant", "tool_calls": [
        {"id": "call_ok", "type": "function", "function": {"name": "login", "arguments": json.dumps(ARGUMENTS)}},
        {"id": "call_bad", "type": "function", "function": {"name": "login", "arguments": json.dumps(
            {**ARGUMENTS, "account": {"region": "eu", "token": {"raw": TOKEN}}})}},
    ]}
    opened = gateway.client.post("/v1/batches", json={"format": "openai_chat", "message": message, "wait_s": 0},
                                 headers=gateway.headers())
    assert opened.status_code == 202, opened.text
    ok_id, bad_id = opened.json()["receipts"]
    done = executor(gateway).execute(ok_id, 30)
    assert done is not None and done.status == "success"
    assert RECEIVED and RECEIVED[0]["token"] == TOKEN
    batch = gateway.client.get(f"/v1/batches/{opened.json()['id']}", headers=gateway.headers()).json()
    assert batch["status"] == "completed"
    assert [m["tool_call_id"] for m in batch["messages"]] == ["call_ok", "call_bad"]
    bad = gateway.client.get(f"/v1/receipts/{bad_id}", headers=gateway.headers()).json()
    assert bad["status"] == "failed" and bad["error"]["code"] == "invalid_arguments"
    assert bad["input"]["account"] == {"region": "eu", "token": MASK} and bad["input"]["password"] == MASK
    assert_no_secret(json.dumps(batch), json.dumps(bad), everything_stored(gateway.db))


def test_a_batch_with_secrets_is_fingerprinted_with_the_secret_key(gateway: Gateway) -> None:
    def message(password: str) -> dict[str, Any]:
        return {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "login", "arguments": json.dumps({**ARGUMENTS, "password": password})}}]}

    def open_batch(password: str) -> Any:
        return gateway.client.post("/v1/batches", json={"format": "openai_chat", "message": message(password),
                                                        "wait_s": 0},
                                   headers={**gateway.headers(), "Idempotency-Key": "sign-in-1"})

    first, again = open_batch(PASSWORD), open_batch(PASSWORD)
    assert (first.status_code, again.status_code) == (202, 202) and again.json()["id"] == first.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"
    assert_problem(open_batch("another-password"), 422)
    stored = sql.value(gateway.db, "SELECT request_hash FROM batches")
    plain = BatchRequest(format="openai_chat", message=message(PASSWORD)).model_dump(
        include={"format", "message", "max_result_chars", "metadata", "webhook_url"})
    assert stored != fingerprint(plain)  # a plain hash could be matched against guessed passwords
    assert len(stored) == 64
