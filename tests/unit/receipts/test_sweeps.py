"""The sweeper: expired leases, lost messages and passed deadlines, settled with fenced transitions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from receipts.db import Database, utcnow
from receipts.schema.tables import receipts
from receipts.store.calls import Outcome, ReceiptStore, error
from receipts.store.sweeps import Sweeper
from tests.support.factories import TENANT, call, spec

REPUBLISH_AFTER_S = 30


@pytest.fixture
def store(any_db: Database) -> ReceiptStore:
    return ReceiptStore(any_db)


@pytest.fixture
def sweeper(store: ReceiptStore) -> Sweeper:
    return Sweeper(store, republish_after_s=REPUBLISH_AFTER_S)


def later(seconds: float):  # noqa: ANN201 - a datetime
    return utcnow() + timedelta(seconds=seconds)


def test_nothing_to_do_on_a_fresh_receipt(store: ReceiptStore, sweeper: Sweeper) -> None:
    store.create(call())
    report = sweeper.sweep()
    assert (report.republished, report.reclaimed, report.lost, report.expired) == ([], 0, 0, 0)


def test_expired_lease_of_a_retry_safe_receipt_goes_back_to_pending(store: ReceiptStore, sweeper: Sweeper) -> None:
    receipt, _ = store.create(call(spec("lookup", effect="read")))
    store.claim(receipt.id, lease_s=5, actor="w")
    assert sweeper.sweep(later(1)).reclaimed == 0  # lease still valid
    report = sweeper.sweep(later(10))
    assert report.reclaimed == 1
    assert [r.id for r in report.republished] == [receipt.id]  # re-sent in the same pass
    again = store.get(TENANT, receipt.id)
    assert again.status == "pending"
    assert again.attempt == 1
    assert again.error is not None and again.error["retryable"] is True
    events = store.events(TENANT, receipt.id)
    assert [(e.from_status, e.to_status, e.actor) for e in events[-1:]] == [("running", "pending", "sweeper")]
    claimed = store.claim(receipt.id, lease_s=5, actor="w2", now=later(10))
    assert claimed is not None and claimed.attempt == 2


def test_a_reclaimed_receipt_is_resent_in_the_same_pass(store: ReceiptStore, sweeper: Sweeper) -> None:
    receipt, _ = store.create(call(spec("lookup", effect="read")))
    store.claim(receipt.id, lease_s=5, actor="w")
    with store.db.transaction() as conn:  # the worker died and its lease ran out a moment ago
        conn.execute(update(receipts).where(receipts.c.id == receipt.id)
                     .values(lease_expires_at=utcnow() - timedelta(seconds=1)))
    report = sweeper.sweep()
    assert report.reclaimed == 1
    assert [r.id for r in report.republished] == [receipt.id]


def test_expired_lease_of_an_idempotent_write_is_retried(store: ReceiptStore, sweeper: Sweeper) -> None:
    receipt, _ = store.create(call(spec("upsert", effect="write", idempotent=True)))
    store.claim(receipt.id, lease_s=5, actor="w")
    assert sweeper.sweep(later(10)).reclaimed == 1
    assert store.get(TENANT, receipt.id).status == "pending"


def test_expired_lease_of_a_non_idempotent_write_is_outcome_unknown(store: ReceiptStore, sweeper: Sweeper) -> None:
    receipt, _ = store.create(call(spec("charge", effect="write", idempotent=False)))
    store.claim(receipt.id, lease_s=5, actor="w")
    report = sweeper.sweep(later(10))
    assert (report.reclaimed, report.lost) == (0, 1)
    final = store.get(TENANT, receipt.id)
    assert final.status == "failed"
    assert final.error is not None
    assert final.error["code"] == "outcome_unknown"
    assert final.error["retryable"] is False
    assert store.claim(receipt.id, lease_s=5, actor="w2") is None  # never run again
    assert sweeper.sweep(later(20)).republished == []


def test_expired_lease_with_no_attempts_left_fails(store: ReceiptStore, sweeper: Sweeper) -> None:
    receipt, _ = store.create(call(spec("lookup", max_attempts=1)))
    store.claim(receipt.id, lease_s=5, actor="w")
    assert sweeper.sweep(later(10)).lost == 1
    final = store.get(TENANT, receipt.id)
    assert final.status == "failed" and final.error["retryable"] is False  # type: ignore[index]


def test_a_worker_finishing_after_its_lease_was_reclaimed_is_fenced_out(store: ReceiptStore, sweeper: Sweeper) -> None:
    receipt, _ = store.create(call(spec("charge", effect="write", idempotent=False)))
    store.claim(receipt.id, lease_s=5, actor="w")
    sweeper.sweep(later(10))
    assert store.finish(receipt.id, 1, Outcome("success", output="late"), actor="w") is None
    assert store.get(TENANT, receipt.id).error["code"] == "outcome_unknown"  # type: ignore[index]


def test_lost_message_is_republished_once_per_interval(store: ReceiptStore, sweeper: Sweeper) -> None:
    receipt, _ = store.create(call())
    assert sweeper.sweep(later(REPUBLISH_AFTER_S - 5)).republished == []  # its message may still arrive
    now = later(REPUBLISH_AFTER_S + 1)
    assert [r.id for r in sweeper.sweep(now).republished] == [receipt.id]
    assert sweeper.sweep(now + timedelta(seconds=1)).republished == []  # marked as published
    again = sweeper.sweep(now + timedelta(seconds=REPUBLISH_AFTER_S + 1)).republished
    assert [r.id for r in again] == [receipt.id]


def test_a_retry_left_to_the_sweeper_is_published_when_due(store: ReceiptStore, sweeper: Sweeper) -> None:
    receipt, _ = store.create(call())
    store.claim(receipt.id, lease_s=30, actor="w")
    store.retry_later(receipt.id, 1, error("upstream_error", "503", retryable=True), delay_s=90, published=False,
                      actor="w")
    assert sweeper.sweep(later(60)).republished == []
    assert [r.id for r in sweeper.sweep(later(91)).republished] == [receipt.id]


def test_running_and_terminal_receipts_are_not_republished(store: ReceiptStore, sweeper: Sweeper) -> None:
    running, _ = store.create(call())
    done, _ = store.create(call())
    store.claim(running.id, lease_s=3600, actor="w")
    store.claim(done.id, lease_s=3600, actor="w")
    store.finish(done.id, 1, Outcome("success", output=1), actor="w")
    assert sweeper.sweep(later(REPUBLISH_AFTER_S + 1)).republished == []


def test_pending_past_its_deadline_expires(store: ReceiptStore, sweeper: Sweeper) -> None:
    receipt, _ = store.create(call(deadline_s=60))
    assert sweeper.sweep(later(30)).expired == 0
    report = sweeper.sweep(later(61))
    assert report.expired == 1
    assert report.republished == []
    final = store.get(TENANT, receipt.id)
    assert final.status == "failed"
    assert final.error is not None and final.error["code"] == "expired"
    assert final.finished_at is not None


def test_a_retry_past_the_deadline_fails_with_its_last_error(store: ReceiptStore, sweeper: Sweeper) -> None:
    receipt, _ = store.create(call(deadline_s=60))
    store.claim(receipt.id, lease_s=30, actor="w")
    store.retry_later(receipt.id, 1, error("upstream_error", "503", retryable=True), delay_s=10, published=True,
                      actor="w")
    sweeper.sweep(later(61))
    final = store.get(TENANT, receipt.id)
    assert final.status == "failed"
    assert final.error["code"] == "upstream_error"  # type: ignore[index]
    assert final.error["retryable"] is False  # type: ignore[index]


def test_waiting_past_its_deadline_expires(store: ReceiptStore, sweeper: Sweeper) -> None:
    receipt, _ = store.create(call(spec("ask", kind="function"), deadline_s=60), status="waiting")
    assert sweeper.sweep(later(61)).expired == 1
    final = store.get(TENANT, receipt.id)
    assert final.status == "failed" and final.error["code"] == "expired"  # type: ignore[index]


def test_after_restart_every_lease_is_reclaimed_and_every_pending_receipt_resent(store: ReceiptStore,
                                                                                sweeper: Sweeper) -> None:
    running, _ = store.create(call(spec("lookup")))
    write, _ = store.create(call(spec("charge", effect="write", idempotent=False)))
    queued, _ = store.create(call())
    store.claim(running.id, lease_s=3600, actor="w")
    store.claim(write.id, lease_s=3600, actor="w")
    report = sweeper.sweep(after_restart=True)
    assert (report.reclaimed, report.lost) == (1, 1)
    assert {r.id for r in report.republished} == {running.id, queued.id}
    assert store.get(TENANT, write.id).error["code"] == "outcome_unknown"  # type: ignore[index]


def test_after_restart_a_retry_scheduled_for_later_is_sent_as_soon_as_it_is_due(store: ReceiptStore,
                                                                                sweeper: Sweeper) -> None:
    receipt, _ = store.create(call())
    store.claim(receipt.id, lease_s=30, actor="w")
    # The worker queued the retry with a countdown, which an in-memory broker loses in a restart.
    store.retry_later(receipt.id, 1, error("upstream_error", "503", retryable=True), delay_s=20, published=True,
                      actor="w")
    assert sweeper.sweep(after_restart=True).republished == []  # not due yet
    assert [r.id for r in sweeper.sweep(later(21)).republished] == [receipt.id]
