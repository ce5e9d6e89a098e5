"""Claiming and recording: leases, disjoint batches, fencing, endpoint health.

Time is the database's: a lease running out or a failure streak that began long ago is made by
moving the rows' timestamps back in SQL, not by handing the queue another clock.
"""

from __future__ import annotations

import threading
import time

import pytest

from receipts import states, tenants
from receipts.db import Database
from receipts.records import ToolSpec
from receipts.secretbox import SecretBox
from receipts.settings import Settings
from receipts.store import calls
from receipts.store.calls import NewCall, Result
from receipts.webhooks import endpoints, queue
from receipts.webhooks.endpoints import Endpoints
from receipts.webhooks.records import DELIVERED, FAILED, PENDING, Claimed, Delivery, Endpoint, Settled
from tests.support import sql

ECHO = ToolSpec(name="echo", kind="python", description="", parameters={})


class Setup:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.tenant = db.run(tenants.ensure("acme")).id
        self.endpoints = Endpoints(SecretBox("queue-tests"))
        self.endpoint, _ = db.run(self.endpoints.create_endpoint(self.tenant, "http://127.0.0.1:9/hook",
                                                                 event_types=["receipt.succeeded"]))

    def succeed(self, count: int = 1) -> None:
        for _ in range(count):
            receipt, _ = self.db.run(calls.create(NewCall(tenant_id=self.tenant, tool=ECHO, arguments={},
                                                          deadline_s=60)))
            lease = self.db.run(calls.claim(receipt.id, lease_s=30, actor="t"))
            assert lease is not None
            self.db.run(calls.finish(receipt.id, lease.receipt.attempt, Result(states.SUCCESS, output={}), actor="t"))

    def claim(self, limit: int = 10, *, lease_s: float = 30) -> list[Claimed]:
        return self.db.run(queue.claim(limit, lease_s=lease_s))

    def record(self, results: list[Settled]) -> None:
        self.db.run(queue.record(results, disable_after_s=60))

    def delivery(self, message_id: str) -> Delivery:
        return self.db.run(endpoints.delivery(self.tenant, message_id))

    def get_endpoint(self) -> Endpoint:
        return self.db.run(endpoints.get_endpoint(self.tenant, self.endpoint.id))


def settled(message: Claimed, *, status: str = DELIVERED, health: str | None = "ok", code: int | None = 200) -> Settled:
    return Settled(message_id=message.id, endpoint_id=message.endpoint_id, lease=message.lease,
                   sent_at=time.monotonic(), success=status == DELIVERED, status_code=code, latency_ms=1.0,
                   response="ok", error=None if code == 200 else "failed", status=status, attempts=message.attempts + 1,
                   retry_in_s=0.0 if status == PENDING else None, health=health)


@pytest.fixture
def setup(db: Database) -> Setup:
    return Setup(db)


def test_a_transition_writes_one_message_per_subscribed_endpoint(setup: Setup) -> None:
    other, _ = setup.db.run(setup.endpoints.create_endpoint(setup.tenant, "http://127.0.0.1:9/all"))
    setup.db.run(setup.endpoints.create_endpoint(setup.tenant, "http://127.0.0.1:9/off", enabled=False))
    setup.succeed()
    claimed = setup.claim()
    by_endpoint = sorted((m.endpoint_id or "", m.event_type) for m in claimed)
    assert by_endpoint == sorted([(other.id, "receipt.running"), (other.id, "receipt.succeeded"),
                                  (setup.endpoint.id, "receipt.succeeded")])
    assert all(m.url.startswith("http://127.0.0.1:9/") and len(m.secrets) == 1 for m in claimed)


def expire_leases(setup: Setup) -> None:
    """Every lease ran out a second ago (by the database's clock)."""
    sql.execute(setup.db, "UPDATE webhook_messages SET locked_until = now() - interval '1 second' "
                          "WHERE locked_until IS NOT NULL")


def test_a_claimed_message_is_not_claimed_again_until_its_lease_ends(setup: Setup) -> None:
    setup.succeed()
    first = setup.claim()
    assert len(first) == 1
    assert setup.claim() == []
    expire_leases(setup)
    again = setup.claim()
    assert [m.id for m in again] == [first[0].id]


def test_a_lease_is_database_time_from_the_claim(setup: Setup) -> None:
    setup.succeed()
    [message] = setup.claim(lease_s=30)
    left = sql.value(setup.db, "SELECT extract(epoch FROM locked_until - now()) FROM webhook_messages "
                               "WHERE id = %(id)s", id=message.id)
    assert 28 < float(left) <= 30


def test_a_late_result_is_logged_but_does_not_overwrite_the_new_lease_holder(setup: Setup) -> None:
    setup.succeed()
    [stale] = setup.claim(lease_s=1)
    expire_leases(setup)
    [fresh] = setup.claim(lease_s=30)
    setup.record([settled(stale, status=FAILED, health="failing", code=500)])
    delivery = setup.delivery(stale.id)
    assert delivery.status == PENDING and len(delivery.attempts) == 1
    setup.record([settled(fresh)])
    delivery = setup.delivery(stale.id)
    assert delivery.status == DELIVERED and len(delivery.attempts) == 2


def test_a_batch_is_recorded_in_one_go(setup: Setup) -> None:
    setup.succeed(30)
    claimed = setup.claim(100)
    assert len(claimed) == 30
    setup.record([settled(m) for m in claimed[:20]] +
                 [settled(m, status=PENDING, health="failing", code=500) for m in claimed[20:]])
    page = setup.db.run(endpoints.deliveries(setup.tenant, endpoint_id=setup.endpoint.id, limit=100)).items
    assert sorted(d.status for d in page).count(DELIVERED) == 20
    assert all(len(d.attempts) == 1 for d in page)
    assert setup.get_endpoint().failing_since is None  # some succeeded


def test_failing_past_the_limit_disables_and_410_disables_at_once(setup: Setup) -> None:
    setup.succeed(2)
    first, second = setup.claim()
    setup.record([settled(first, status=PENDING, health="failing", code=500)])
    # The streak began two minutes ago: past the 60 s limit when the next failure is recorded.
    sql.execute(setup.db, "UPDATE webhook_endpoints SET failing_since = now() - interval '120 seconds' "
                          "WHERE id = %(id)s", id=setup.endpoint.id)
    setup.record([settled(second, status=PENDING, health="failing", code=500)])
    endpoint = setup.get_endpoint()
    assert not endpoint.enabled and "every delivery failed from" in (endpoint.disabled_reason or "")
    setup.db.run(endpoints.update_endpoint(setup.tenant, endpoint.id, enabled=True))
    setup.succeed()
    [third] = [m for m in setup.claim() if m.id not in {first.id, second.id}]
    setup.record([settled(third, status=FAILED, health="gone", code=410)])
    endpoint = setup.get_endpoint()
    assert not endpoint.enabled and "410 Gone" in (endpoint.disabled_reason or "")


def test_deleting_an_endpoint_removes_its_messages(setup: Setup) -> None:
    setup.succeed()
    setup.db.run(endpoints.delete_endpoint(setup.tenant, setup.endpoint.id))
    assert setup.claim() == []


def test_release_all_frees_every_lease(setup: Setup) -> None:
    setup.succeed(3)
    assert len(setup.claim(lease_s=300)) == 3
    assert setup.db.run(queue.release_all()) == 3
    assert len(setup.claim(lease_s=300)) == 3


def test_concurrent_dispatchers_claim_disjoint_batches(db: Database) -> None:
    setup = Setup(db)
    setup.succeed(60)
    results: list[list[Claimed]] = []
    barrier = threading.Barrier(4)

    def claim() -> None:
        barrier.wait()
        batch: list[Claimed] = []
        while taken := db.run(queue.claim(7, lease_s=30)):
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
