"""Claiming and recording on SQLite and PostgreSQL: leases, disjoint batches, fencing, endpoint health."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from receipts import states
from receipts.db import Database
from receipts.records import ToolSpec
from receipts.settings import Settings
from receipts.store.calls import NewCall, Outcome, ReceiptStore
from receipts.tenants import Tenants
from receipts.webhooks.endpoints import WebhookStore
from receipts.webhooks.queue import DeliveryQueue
from receipts.webhooks.records import DELIVERED, FAILED, PENDING, Claimed, Settled

ECHO = ToolSpec(name="echo", kind="python", description="", parameters={})


class Setup:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.tenant = Tenants(db).ensure("acme").id
        self.store = ReceiptStore(db)
        self.webhooks = WebhookStore(db, "queue-tests")
        self.queue = DeliveryQueue(db, disable_after_s=60)
        self.endpoint, _ = self.webhooks.create_endpoint(self.tenant, "http://127.0.0.1:9/hook",
                                                         event_types=["receipt.succeeded"])

    def succeed(self, count: int = 1) -> None:
        for _ in range(count):
            receipt, _ = self.store.create(NewCall(tenant_id=self.tenant, tool=ECHO, arguments={}, deadline_s=60))
            running = self.store.claim(receipt.id, lease_s=30, actor="t")
            assert running is not None
            self.store.finish(receipt.id, running.attempt, Outcome(states.SUCCESS, output={}), actor="t")


def settled(message: Claimed, *, status: str = DELIVERED, health: str | None = "ok", code: int | None = 200,
            at: datetime | None = None) -> Settled:
    return Settled(message_id=message.id, endpoint_id=message.endpoint_id, lease=message.lease,
                   at=at or datetime.now(UTC), success=status == DELIVERED, status_code=code, latency_ms=1.0,
                   response="ok", error=None if code == 200 else "failed", status=status, attempts=message.attempts + 1,
                   next_attempt_at=datetime.now(UTC) if status == PENDING else None, health=health)


@pytest.fixture
def setup(any_db: Database) -> Setup:
    return Setup(any_db)


def test_a_transition_writes_one_message_per_subscribed_endpoint(setup: Setup) -> None:
    other, _ = setup.webhooks.create_endpoint(setup.tenant, "http://127.0.0.1:9/all")
    setup.webhooks.create_endpoint(setup.tenant, "http://127.0.0.1:9/off", enabled=False)
    setup.succeed()
    claimed = setup.queue.claim(10, lease_s=30)
    by_endpoint = sorted((m.endpoint_id or "", m.event_type) for m in claimed)
    assert by_endpoint == sorted([(other.id, "receipt.running"), (other.id, "receipt.succeeded"),
                                  (setup.endpoint.id, "receipt.succeeded")])
    assert all(m.url.startswith("http://127.0.0.1:9/") and len(m.secrets) == 1 for m in claimed)


def test_a_claimed_message_is_not_claimed_again_until_its_lease_ends(setup: Setup) -> None:
    setup.succeed()
    first = setup.queue.claim(10, lease_s=30)
    assert len(first) == 1
    assert setup.queue.claim(10, lease_s=30) == []
    later = datetime.now(UTC) + timedelta(seconds=31)
    again = setup.queue.claim(10, lease_s=30, now=later)
    assert [m.id for m in again] == [first[0].id]


def test_a_late_result_is_logged_but_does_not_overwrite_the_new_lease_holder(setup: Setup) -> None:
    setup.succeed()
    [stale] = setup.queue.claim(10, lease_s=1)
    [fresh] = setup.queue.claim(10, lease_s=30, now=datetime.now(UTC) + timedelta(seconds=2))
    setup.queue.record([settled(stale, status=FAILED, health="failing", code=500)])
    delivery = setup.webhooks.delivery(setup.tenant, stale.id)
    assert delivery.status == PENDING and len(delivery.attempts) == 1
    setup.queue.record([settled(fresh)])
    delivery = setup.webhooks.delivery(setup.tenant, stale.id)
    assert delivery.status == DELIVERED and len(delivery.attempts) == 2


def test_a_batch_is_recorded_in_one_go(setup: Setup) -> None:
    setup.succeed(30)
    claimed = setup.queue.claim(100, lease_s=30)
    assert len(claimed) == 30
    setup.queue.record([settled(m) for m in claimed[:20]] +
                       [settled(m, status=PENDING, health="failing", code=500) for m in claimed[20:]])
    page = setup.webhooks.deliveries(setup.tenant, endpoint_id=setup.endpoint.id, limit=100).items
    assert sorted(d.status for d in page).count(DELIVERED) == 20
    assert all(len(d.attempts) == 1 for d in page)
    assert setup.webhooks.get_endpoint(setup.tenant, setup.endpoint.id).failing_since is None  # some succeeded


def test_failing_past_the_limit_disables_and_410_disables_at_once(setup: Setup) -> None:
    setup.succeed(2)
    first, second = setup.queue.claim(10, lease_s=30)
    past = datetime.now(UTC) - timedelta(seconds=120)
    setup.queue.record([settled(first, status=PENDING, health="failing", code=500)], now=past)
    setup.queue.record([settled(second, status=PENDING, health="failing", code=500)])
    endpoint = setup.webhooks.get_endpoint(setup.tenant, setup.endpoint.id)
    assert not endpoint.enabled and "every delivery failed from" in (endpoint.disabled_reason or "")
    setup.webhooks.update_endpoint(setup.tenant, endpoint.id, enabled=True)
    setup.succeed()
    [third] = setup.queue.claim(10, lease_s=30, now=datetime.now(UTC) + timedelta(hours=1))[-1:]
    setup.queue.record([settled(third, status=FAILED, health="gone", code=410)])
    endpoint = setup.webhooks.get_endpoint(setup.tenant, setup.endpoint.id)
    assert not endpoint.enabled and "410 Gone" in (endpoint.disabled_reason or "")


def test_deleting_an_endpoint_removes_its_messages(setup: Setup) -> None:
    setup.succeed()
    setup.webhooks.delete_endpoint(setup.tenant, setup.endpoint.id)
    assert setup.queue.claim(10, lease_s=30) == []


def test_release_all_frees_every_lease(setup: Setup) -> None:
    setup.succeed(3)
    assert len(setup.queue.claim(10, lease_s=300)) == 3
    assert setup.queue.release_all() == 3
    assert len(setup.queue.claim(10, lease_s=300)) == 3


def test_concurrent_dispatchers_claim_disjoint_batches(pg_db: Database) -> None:
    setup = Setup(pg_db)
    setup.succeed(60)
    results: list[list[Claimed]] = []
    barrier = threading.Barrier(4)

    def claim() -> None:
        queue = DeliveryQueue(pg_db, disable_after_s=60)
        barrier.wait()
        batch: list[Claimed] = []
        while taken := queue.claim(7, lease_s=30):
            batch += taken
        results.append(batch)

    threads = [threading.Thread(target=claim) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [m.id for batch in results for m in batch]
    assert len(ids) == 60 and len(set(ids)) == 60


def test_settings_schedule_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLRELAY_WEBHOOK_RETRY_SCHEDULE", "0, 1.5,3")
    assert Settings().retry_schedule_s == [0.0, 1.5, 3.0]
