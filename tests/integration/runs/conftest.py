"""One real deployment for the run tests, a scripted Chat Completions server, and a tenant (with a model) per test."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from receipts.tenants import create_key
from tests.support.model_server import ModelServer, Turn, model_server
from tests.support.stack import Stack, running_stack

TERMINAL = {"success", "failed", "canceled"}


@pytest.fixture(scope="package")
def models() -> Iterator[ModelServer]:
    with model_server() as server:
        yield server


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("runs"), outbound_allow_cidrs="127.0.0.0/8",
                       model_timeout_s=10) as running:
        yield running


@dataclass
class Agent:
    """A tenant with one model defined, whose turns the test scripts."""

    stack: Stack
    models: ModelServer
    key: str
    model: str

    def client(self) -> httpx.Client:
        return self.stack.client(self.key)

    def script(self, *turns: Turn) -> None:
        self.models.script(self.model, *turns)

    def start(self, input: Any = "Do the task.", *, expect: int | None = None, **fields: Any) -> httpx.Response:
        with self.client() as client:
            response = client.post("/v1/runs", json={"model": "scripted", "input": input, **fields})
        if expect is not None:
            assert response.status_code == expect, response.text
        return response

    def wait(self, run_id: str, timeout: float = 60, *, until: set[str] | None = None) -> dict[str, Any]:
        """The run once its status is in ``until`` (default: it ended)."""
        until = until or TERMINAL
        deadline = time.monotonic() + timeout
        with self.client() as client:
            while True:
                run = client.get(f"/v1/runs/{run_id}", params={"wait_s": 5}).json()
                if run["status"] in until or time.monotonic() > deadline:
                    return run  # type: ignore[no-any-return]

    def run(self, input: Any = "Do the task.", **fields: Any) -> dict[str, Any]:
        """Start a run and wait for its end."""
        response = self.start(input, **fields)
        assert response.status_code in (200, 202), response.text
        return self.wait(response.json()["id"])

    def receipt(self, receipt_id: str) -> dict[str, Any]:
        with self.client() as client:
            return client.get(f"/v1/receipts/{receipt_id}").json()  # type: ignore[no-any-return]


@pytest.fixture
def agent(stack: Stack, models: ModelServer) -> Agent:
    name = f"runs-{uuid.uuid4().hex[:10]}"
    key = stack.db.run(create_key(name))
    model = f"model-{uuid.uuid4().hex[:10]}"
    with stack.client(key) as client:
        defined = client.put("/v1/models/scripted", json={"base_url": models.url, "model": model,
                                                          "api_key": "sk-test-secret", "params": {"temperature": 0}})
        assert defined.status_code == 200, defined.text
    return Agent(stack, models, key, model)
