"""Shared steps of the webhook integration tests: a tenant of its own per test, endpoints, waiting on the log."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx

from receipts import tenants
from tests.support.receiver import Receiver
from tests.support.stack import Stack


class Hooks:
    """One tenant on a stack, so tests sharing a stack never see each other's endpoints or messages."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.key = stack.db.run(tenants.create_key(f"hooks-{uuid.uuid4().hex[:10]}"))

    def client(self) -> httpx.Client:
        return self.stack.client(self.key)

    def endpoint(self, receiver: Receiver, *, event_types: list[str] | None = None, **extra: Any) -> dict[str, Any]:
        with self.client() as client:
            response = client.post("/v1/webhook-endpoints", json={"url": receiver.url, "event_types": event_types or [],
                                                                  **extra})
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        receiver.secrets.append(body["secret"])
        return body

    def call(self, tool: str = "echo", arguments: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
        with self.client() as client:
            response = client.post("/v1/tool-calls", json={"tool": tool, "arguments": arguments or {"n": 1}, **extra})
        assert response.status_code == 202, response.text
        return response.json()  # type: ignore[no-any-return]

    def finished(self, receipt_id: str) -> dict[str, Any]:
        return self.stack.wait_terminal(receipt_id, key=self.key)

    def deliveries(self, endpoint_id: str, **params: Any) -> list[dict[str, Any]]:
        with self.client() as client:
            response = client.get(f"/v1/webhook-endpoints/{endpoint_id}/deliveries", params={"limit": 200, **params})
        assert response.status_code == 200, response.text
        return response.json()["data"]  # type: ignore[no-any-return]

    def wait_log(self, endpoint_id: str, predicate: Any, timeout: float = 40.0) -> list[dict[str, Any]]:
        """Poll the deliveries log until ``predicate(deliveries)`` holds."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.deliveries(endpoint_id)
            if predicate(found):
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"deliveries log never matched: {found}\n{self.stack.logs()}")
            time.sleep(0.2)

    def get(self, path: str) -> dict[str, Any]:
        with self.client() as client:
            response = client.get(path)
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]
