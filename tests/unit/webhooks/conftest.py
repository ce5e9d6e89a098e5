"""A webhook test bench on a real database: tenants, endpoints, receipts that emit messages, a dispatcher."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from receipts import states, tenants
from receipts.db import Database, Op
from receipts.records import ToolSpec
from receipts.secretbox import SecretBox
from receipts.settings import Settings
from receipts.store import calls
from receipts.store.calls import NewCall, Result
from receipts.webhooks import endpoints
from receipts.webhooks.endpoints import Endpoints
from receipts.webhooks.records import Endpoint
from tests.support.receiver import Receiver
from webhooks.dispatcher import Dispatcher
from webhooks.tasks import build_dispatcher

T = TypeVar("T")

ECHO = ToolSpec(name="echo", kind="python", description="", parameters={})
BASE: dict[str, Any] = {"secret_key": "unit-secret-key", "outbound_allow_cidrs": ["127.0.0.0/8"],
        "webhook_retry_schedule": ["0", "0.3", "0.3", "0.3"], "webhook_timeout_s": 1.0}


@dataclass
class Bench:
    db: Database
    settings: Settings
    tenant_id: str
    endpoints: Endpoints

    def run(self, op: Op[T]) -> T:
        return self.db.run(op)

    def configure(self, **overrides: Any) -> Settings:
        self.settings = self.settings.model_copy(update=overrides)
        return self.settings

    def dispatcher(self) -> Dispatcher:
        return build_dispatcher(self.settings, self.db)

    def endpoint(self, receiver: Receiver, **options: Any) -> Endpoint:
        """Register ``receiver`` and teach it the new secret."""
        endpoint, secret = self.run(self.endpoints.create_endpoint(self.tenant_id, options.pop("url", receiver.url),
                                                                   **options))
        receiver.secrets.append(secret)
        return endpoint

    def call(self, *, webhook_url: str | None = None, succeed: bool = True) -> str:
        """A receipt taken pending -> running -> success (announcing receipt.running, receipt.succeeded)."""
        receipt, _ = self.run(calls.create(NewCall(tenant_id=self.tenant_id, tool=ECHO, arguments={"x": 1},
                                                   deadline_s=60, webhook_url=webhook_url)))
        lease = self.run(calls.claim(receipt.id, lease_s=30, actor="test"))
        assert lease is not None
        if succeed:
            self.run(calls.finish(receipt.id, lease.receipt.attempt, Result(states.SUCCESS, output={"x": 1}),
                                  actor="test"))
        return receipt.id

    def pending(self) -> int:
        return self.run(endpoints.pending_count())

    def deliver_until_settled(self, timeout: float = 20.0) -> None:
        """Run the dispatcher until no message is pending (retries included)."""
        deadline = time.monotonic() + timeout
        while self.pending() and time.monotonic() < deadline:
            self.dispatcher().run(max_s=5)
            time.sleep(0.05)
        assert not self.pending(), "messages still pending"


@pytest.fixture
def bench(db: Database) -> Iterator[Bench]:
    settings = Settings(database_url=db.url, **BASE)
    tenant = db.run(tenants.ensure("acme"))
    yield Bench(db, settings, tenant.id, Endpoints(SecretBox(settings.secret_key)))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running
