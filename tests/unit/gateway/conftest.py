"""The gateway on a test's PostgreSQL database with a sender that records tasks instead of sending them.

The app runs in process (fastapi's TestClient, used as a context manager so the app's lifespan opens
its async pool and starts its LISTEN connection); tests play the worker with the store's operations.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gateway.app import create_app
from receipts import tenants
from receipts.catalogue import tools as catalogue
from receipts.db import Database
from receipts.messages import EXECUTE_TASK
from receipts.records import ToolSpec
from receipts.settings import Settings
from receipts.store import calls
from receipts.store.calls import Result
from tests.support import sql
from tests.support.factories import RecordingSender

TOOLS = [
    ToolSpec(name="echo", kind="python", description="Return the arguments.",
             parameters={"type": "object", "additionalProperties": True}, effect="read", timeout_s=5),
    ToolSpec(name="add", kind="python", description="Add two integers.", effect="read",
             parameters={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                         "required": ["a", "b"], "additionalProperties": False}),
    ToolSpec(name="charge", kind="python", description="Charge a card.", effect="write", idempotent=False,
             parameters={"type": "object", "properties": {"cents": {"type": "integer", "minimum": 1}},
                         "required": ["cents"]}),
]


@dataclass
class Gateway:
    client: TestClient
    sender: RecordingSender
    db: Database
    key: str
    other_key: str
    tenant_id: str

    def headers(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.key}"}

    def post_call(self, body: dict[str, Any], key: str | None = None, **kwargs: Any) -> Any:
        headers = {**self.headers(key), **kwargs.pop("headers", {})}
        return self.client.post("/v1/tool-calls", json=body, headers=headers, **kwargs)

    def receipt_count(self) -> int:
        return int(sql.value(self.db, "SELECT count(*) FROM receipts"))

    def executes(self) -> list[Any]:
        return [message for message in self.sender.sent if message.name == EXECUTE_TASK]

    def finish_soon(self, receipt_id: str, delay_s: float = 0.3) -> threading.Thread:
        """Play a worker: claim and finish the receipt (output = input) in another thread after ``delay_s``."""

        def work() -> None:
            time.sleep(delay_s)
            lease = self.db.run(calls.claim(receipt_id, lease_s=30, actor="test-worker"))
            assert lease is not None
            claimed = lease.receipt
            self.db.run(calls.finish(receipt_id, claimed.attempt, Result("success", output=claimed.input),
                                     actor="test-worker"))

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        return thread


@contextmanager
def running_gateway(db: Database, **settings: Any) -> Iterator[Gateway]:
    """The app on ``db`` (with its async pool and listener, opened by its lifespan), two tenants, the test tools."""
    app_settings = Settings(**{"database_url": db.url, "secret_key": "unit-test-secret", **settings})
    sender = RecordingSender()
    db.run(catalogue.publish(TOOLS))
    key = db.run(tenants.create_key("acme"))
    other_key = db.run(tenants.create_key("intruders"))
    tenant = db.run(tenants.for_key(key))
    assert tenant is not None
    with TestClient(create_app(app_settings, db=db, sender=sender)) as client:
        yield Gateway(client, sender, db, key, other_key, tenant.id)


@pytest.fixture
def gateway(db: Database) -> Iterator[Gateway]:
    with running_gateway(db) as running:
        yield running


def assert_problem(response: Any, status: int) -> dict[str, Any]:
    """The response is an RFC 9457 problem document with ``status``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    assert "type" in body
    return body
