"""Secrets in arguments on a real deployment: the tool (in a worker process) gets them, every API and
webhook surface, and every process's log, shows the mask."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from tests.support import sql
from tests.support.receiver import Receiver
from tests.support.stack import Stack, running_stack

pytestmark = pytest.mark.integration

MASK = "********"
PASSWORD = "pw-" + uuid.uuid4().hex
TOKENS = ["tok-" + uuid.uuid4().hex, "tok-" + uuid.uuid4().hex]
SECRETS = (PASSWORD, *TOKENS)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("secrets"), outbound_allow_cidrs="127.0.0.0/8") as running:
        yield running


@pytest.fixture
def receiver(stack: Stack) -> Iterator[Receiver]:
    with Receiver() as running, stack.client() as client:
        created = client.post("/v1/webhook-endpoints", json={"url": running.url})
        assert created.status_code == 201, created.text
        running.secrets.append(created.json()["secret"])
        yield running
        client.delete(f"/v1/webhook-endpoints/{created.json()['id']}")


def arguments(tag: str) -> dict[str, object]:
    return {"tag": tag, "user": "ada", "password": PASSWORD,
            "vaults": [{"name": "main", "token": TOKENS[0]}, {"name": "spare", "token": TOKENS[1]}]}


MASKED_VAULTS = [{"name": "main", "token": MASK}, {"name": "spare", "token": MASK}]


def received(stack: Stack, tag: str) -> list[dict[str, object]]:
    path = stack.effects / tag
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"{secret} leaked in {text[:400]}"


def test_a_worker_runs_the_tool_with_the_secrets_and_nothing_else_shows_them(stack: Stack,
                                                                             receiver: Receiver) -> None:
    tag = f"sign-in-{uuid.uuid4().hex[:8]}"
    with stack.client() as client:
        accepted = client.post("/v1/tool-calls", json={"tool": "sign_in", "arguments": arguments(tag), "wait_s": 30})
        assert accepted.status_code == 200, accepted.text
        receipt = accepted.json()
        assert receipt["status"] == "success", receipt
        events = client.get(f"/v1/receipts/{receipt['id']}/events").text
        listed = client.get("/v1/receipts", params={"tool": "sign_in"}).text
    assert received(stack, tag) == [{"user": "ada", "password": PASSWORD, "tokens": TOKENS}]
    assert receipt["input"] == {**arguments(tag), "password": MASK, "vaults": MASKED_VAULTS}
    assert receipt["output"] == {"user": "ada", "said": f"welcome ada, your password {MASK} works"}
    succeeded = receiver.wait_for(1, type="receipt.succeeded", receipt_id=receipt["id"])[0]
    assert succeeded.verified_by == (0,)
    assert succeeded.payload["data"]["input"]["vaults"] == MASKED_VAULTS
    running = receiver.wait_for(1, type="receipt.running", receipt_id=receipt["id"])[0]
    stored = sql.rows(stack.db, "SELECT to_jsonb(r) - 'secret_input' FROM receipts r WHERE id = %(id)s",
                      id=receipt["id"])
    assert_no_secret(accepted.text, events, listed, succeeded.body.decode(), running.body.decode(),
                     json.dumps(stored), stack.logs())


def test_a_batch_shows_the_model_the_mask_and_the_tool_gets_the_secrets(stack: Stack, receiver: Receiver) -> None:
    tag = f"batch-sign-in-{uuid.uuid4().hex[:8]}"
    message = {"role": "assistant", "content": [
        {"type": "text", "text": "Signing in."},
        {"type": "tool_use", "id": "toolu_1", "name": "sign_in", "input": arguments(tag)},
    ]}
    with stack.client() as client:
        answer = client.post("/v1/batches", json={"format": "anthropic", "message": message, "wait_s": 30})
    assert answer.status_code == 200, answer.text
    batch = answer.json()
    [result] = batch["messages"][0]["content"]
    assert result["tool_use_id"] == "toolu_1" and not result["is_error"]
    assert MASK in result["content"]
    assert received(stack, tag) == [{"user": "ada", "password": PASSWORD, "tokens": TOKENS}]
    completed = receiver.wait_for(1, type="batch.completed")
    assert_no_secret(answer.text, *(request.body.decode() for request in completed), stack.logs())
