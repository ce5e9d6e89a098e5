"""The console and /docs in headless Chromium against a real deployment.

One stack (gateway, Celery workers, beat on PostgreSQL + Redis) and one browser serve every test of
this package. Before the first test, calls are made that end in each way the pages must show: one
succeeds, one fails (``calculate`` with ``1 / 0``: ``invalid_arguments``), one succeeds on its
second attempt (``flaky``), all announced to a webhook endpoint on a local receiver whose first
answer is a 500, so one delivery is retried. The runs and approvals tests work in tenants of their
own, against a scripted Chat Completions server on 127.0.0.1 (hence loopback allow-listed).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.support.browser import Tab, chromium, tab
from tests.support.model_server import ModelServer, model_server
from tests.support.receiver import Receiver, Reply
from tests.support.stack import Stack, running_stack

SETTINGS = {"outbound_allow_cidrs": "127.0.0.0/8", "model_timeout_s": 10, "webhook_retry_schedule": "0,1,1,1",
            "webhook_timeout_s": 2, "webhook_poll_s": 0.5}


@dataclass(frozen=True)
class Scenario:
    """The deployment and what was done on it before the tests look at it in the browser."""

    stack: Stack
    receiver: Receiver
    endpoint: dict[str, Any]
    succeeded: dict[str, Any]
    failed: dict[str, Any]
    retried: dict[str, Any]

    def client(self) -> httpx.Client:
        return self.stack.client()

    def get(self, path: str, **params: Any) -> Any:
        with self.client() as client:
            response = client.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()

    def deliveries(self, **params: Any) -> list[dict[str, Any]]:
        return self.get("/v1/deliveries", limit=200, **params)["data"]  # type: ignore[no-any-return]

    @property
    def console(self) -> str:
        return f"{self.stack.base_url}/console/"


def settle(scenario: Scenario, count: int, timeout: float = 40) -> None:
    """Wait until the endpoint has ``count`` deliveries, every one delivered."""
    deadline = time.monotonic() + timeout
    while True:
        found = scenario.deliveries(endpoint_id=scenario.endpoint["id"])
        if len(found) == count and all(d["status"] == "delivered" for d in found):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"deliveries never settled: {found}")
        time.sleep(0.2)


@pytest.fixture(scope="package")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    with Receiver() as receiver, running_stack(tmp_path_factory.mktemp("console"), **SETTINGS) as stack:
        with stack.client() as client:
            endpoint = client.post("/v1/webhook-endpoints", json={"url": receiver.url, "description": "ops"}).json()
            receiver.secrets.append(endpoint["secret"])
            receiver.respond(Reply(status=500, body="try again"))
            calls = [("calculate", {"expression": "(2 + 3) * 4"}), ("calculate", {"expression": "1 / 0"}),
                     ("flaky", {"tag": "console", "failures": 1})]
            ids = [client.post("/v1/tool-calls", json={"tool": tool, "arguments": arguments}).json()["id"]
                   for tool, arguments in calls]
        succeeded, failed, retried = (stack.wait_terminal(receipt_id) for receipt_id in ids)
        assert (succeeded["status"], failed["status"], retried["status"]) == ("success", "failed", "success")
        assert failed["error"]["code"] == "invalid_arguments" and retried["attempt"] == 2
        found = Scenario(stack, receiver, endpoint, succeeded, failed, retried)
        # receipt.running for every attempt, then the terminal event: 2 + 2 + 3.
        settle(found, 7)
        yield found


@pytest.fixture(scope="package")
def models() -> Iterator[ModelServer]:
    with model_server() as server:
        yield server


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    with chromium() as running:
        yield running


@pytest.fixture
def opened(browser: Browser) -> Iterator[Tab]:
    """A fresh tab; at the end, it must have requested nothing off 127.0.0.1 and thrown no error."""
    with tab(browser) as fresh:
        yield fresh
        assert fresh.blocked == [], f"the page tried to reach other hosts: {fresh.blocked}"
        assert fresh.errors == [], f"the page's scripts failed: {fresh.errors}"


@pytest.fixture
def page(opened: Tab) -> Page:
    return opened.page


def sign_in(page: Page, scenario: Scenario, key: str | None = None) -> None:
    """Open the console's first page and type the key into its key field."""
    page.goto(scenario.console)
    field = page.locator("input[name=api_key]")
    expect(field).to_be_visible()
    field.fill(key or scenario.stack.api_key)
    field.press("Enter")
