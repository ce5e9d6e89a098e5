"""A webhook test bench on a real database: tenants, endpoints, receipts that emit messages, a dispatcher."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from receipts import states
from receipts.db import Database
from receipts.records import ToolSpec
from receipts.settings import Settings
from receipts.store.calls import NewCall, Outcome, ReceiptStore
from receipts.tenants import Tenants
from receipts.webhooks.endpoints import WebhookStore
from receipts.webhooks.queue import DeliveryQueue
from receipts.webhooks.records import Endpoint
from tests.support.receiver import Receiver
from webhooks.dispatcher import Dispatcher
from webhooks.tasks import build_dispatcher

ECHO = ToolSpec(name="echo", kind="python", description="", parameters={})
BASE = {"secret_key": "unit-secret-key", "outbound_allow_cidrs": ["127.0.0.0/8"],
        "webhook_retry_schedule": ["0", "0.3", "0.3", "0.3"], "webhook_timeout_s": 1.0}


@dataclass
class Bench:
    db: Database
    settings: Settings
    tenant_id: str
    store: ReceiptStore
    webhooks: WebhookStore

    def configure(self, **overrides: Any) -> Settings:
        self.settings = self.settings.model_copy(update=overrides)
        return self.settings

    def dispatcher(self) -> Dispatcher:
        return build_dispatcher(self.settings, self.db)

    @property
    def queue(self) -> DeliveryQueue:
        return DeliveryQueue(self.db, disable_after_s=self.settings.webhook_disable_after_s)

    def endpoint(self, receiver: Receiver, **options: Any) -> Endpoint:
        """Register ``receiver`` and teach it the new secret."""
        endpoint, secret = self.webhooks.create_endpoint(self.tenant_id, options.pop("url", receiver.url), **options)
        receiver.secrets.append(secret)
        return endpoint

    def call(self, *, webhook_url: str | None = None, succeed: bool = True) -> str:
        """A receipt taken pending -> running -> success (announcing receipt.running, receipt.succeeded)."""
        receipt, _ = self.store.create(NewCall(tenant_id=self.tenant_id, tool=ECHO, arguments={"x": 1},
                                               deadline_s=60, webhook_url=webhook_url))
        running = self.store.claim(receipt.id, lease_s=30, actor="test")
        assert running is not None
        if succeed:
            self.store.finish(receipt.id, running.attempt, Outcome(states.SUCCESS, output={"x": 1}), actor="test")
        return receipt.id

    def deliver_until_settled(self, timeout: float = 20.0) -> None:
        """Run the dispatcher until no message is pending (retries included)."""
        import time

        deadline = time.monotonic() + timeout
        while self.webhooks.pending_count() and time.monotonic() < deadline:
            self.dispatcher().run(max_s=5)
            time.sleep(0.05)
        assert not self.webhooks.pending_count(), "messages still pending"


@pytest.fixture
def bench(sqlite_db: Database) -> Iterator[Bench]:
    settings = Settings(database_url=str(sqlite_db.engine.url), **BASE)
    tenant = Tenants(sqlite_db).ensure("acme")
    yield Bench(sqlite_db, settings, tenant.id, ReceiptStore(sqlite_db), WebhookStore(sqlite_db, settings.secret_key))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running
