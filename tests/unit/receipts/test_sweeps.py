"""The sweeper: expired leases, lost messages and passed deadlines, settled with fenced transitions.

Time is the database's, so these tests make time pass the way the sweeper sees it: they move the
receipts' times into the past in SQL (:func:`elapse`), never a host's clock.
"""

from __future__ import annotations

from receipts.db import Database
from receipts.records import Receipt
from receipts.store import calls
from receipts.store.calls import NewCall, Result, error
from receipts.store.sweeps import SweepReport, sweep
from tests.support import sql
from tests.support.factories import TENANT, call, spec

REPUBLISH_AFTER_S = 30
TIMES = ("created_at", "updated_at", "started_at", "finished_at", "deadline_at", "available_at", "published_at",
         "lease_expires_at")


def elapse(db: Database, seconds: float) -> None:
    """As if ``seconds`` passed on the database's clock: every receipt's times move that far into the past."""
    moved = ", ".join(f"{column} = {column} - make_interval(secs => %(s)s)" for column in TIMES)
    sql.execute(db, f"UPDATE receipts SET {moved}", s=seconds)


def swept(db: Database, *, after_restart: bool = False) -> SweepReport:
    return db.run(sweep(republish_after_s=REPUBLISH_AFTER_S, after_restart=after_restart))


def create(db: Database, new_call: NewCall, status: str = "pending") -> Receipt:
    receipt, _ = db.run(calls.create(new_call, status=status))
    return receipt


def claim(db: Database, receipt_id: str, *, lease_s: float, actor: str = "w") -> Receipt | None:
    lease = db.run(calls.claim(receipt_id, lease_s=lease_s, actor=actor))
    return None if lease is None else lease.receipt


def get(db: Database, receipt_id: str) -> Receipt:
    return db.run(calls.get(TENANT, receipt_id))


def test_nothing_to_do_on_a_fresh_receipt(db: Database) -> None:
    create(db, call())
    report = swept(db)
    assert (report.republished, report.reclaimed, report.lost, report.expired) == ([], 0, 0, 0)


def test_expired_lease_of_a_retry_safe_receipt_goes_back_to_pending(db: Database) -> None:
    receipt = create(db, call(spec("lookup", effect="read")))
    claim(db, receipt.id, lease_s=5)
    elapse(db, 1)
    assert swept(db).reclaimed == 0  # lease still valid
    elapse(db, 9)
    report = swept(db)
    assert report.reclaimed == 1
    assert [r.id for r in report.republished] == [receipt.id]  # re-sent in the same pass
    again = get(db, receipt.id)
    assert again.status == "pending"
    assert again.attempt == 1
    assert again.error is not None and again.error["retryable"] is True
    events = db.run(calls.events(TENANT, receipt.id))
    assert [(e.from_status, e.to_status, e.actor) for e in events[-1:]] == [("running", "pending", "sweeper")]
    claimed = claim(db, receipt.id, lease_s=5, actor="w2")
    assert claimed is not None and claimed.attempt == 2


def test_a_reclaimed_receipt_is_resent_in_the_same_pass(db: Database) -> None:
    receipt = create(db, call(spec("lookup", effect="read")))
    claim(db, receipt.id, lease_s=5)
    # The worker died and its lease ran out a moment ago.
    sql.execute(db, "UPDATE receipts SET lease_expires_at = now() - interval '1 second' WHERE id = %(id)s",
                id=receipt.id)
    report = swept(db)
    assert report.reclaimed == 1
    assert [r.id for r in report.republished] == [receipt.id]


def test_only_leases_over_by_the_databases_clock_are_reclaimed(db: Database) -> None:
    over = create(db, call(spec("lookup", effect="read")))
    live = create(db, call(spec("lookup", effect="read")))
    claim(db, over.id, lease_s=3600)
    claim(db, live.id, lease_s=3600)
    sql.execute(db, "UPDATE receipts SET lease_expires_at = now() - interval '1 second' WHERE id = %(id)s",
                id=over.id)
    sql.execute(db, "UPDATE receipts SET lease_expires_at = now() + interval '5 seconds' WHERE id = %(id)s",
                id=live.id)
    report = swept(db)
    assert (report.reclaimed, report.lost) == (1, 0)
    assert [r.id for r in report.republished] == [over.id]
    assert (get(db, over.id).status, get(db, live.id).status) == ("pending", "running")


def test_expired_lease_of_an_idempotent_write_is_retried(db: Database) -> None:
    receipt = create(db, call(spec("upsert", effect="write", idempotent=True)))
    claim(db, receipt.id, lease_s=5)
    elapse(db, 10)
    assert swept(db).reclaimed == 1
    assert get(db, receipt.id).status == "pending"


def test_expired_lease_of_a_non_idempotent_write_is_outcome_unknown(db: Database) -> None:
    receipt = create(db, call(spec("charge", effect="write", idempotent=False)))
    claim(db, receipt.id, lease_s=5)
    elapse(db, 10)
    report = swept(db)
    assert (report.reclaimed, report.lost) == (0, 1)
    final = get(db, receipt.id)
    assert final.status == "failed"
    assert final.error is not None
    assert final.error["code"] == "outcome_unknown"
    assert final.error["retryable"] is False
    assert claim(db, receipt.id, lease_s=5, actor="w2") is None  # never run again
    elapse(db, 10)
    assert swept(db).republished == []


def test_expired_lease_with_no_attempts_left_fails(db: Database) -> None:
    receipt = create(db, call(spec("lookup", max_attempts=1)))
    claim(db, receipt.id, lease_s=5)
    elapse(db, 10)
    assert swept(db).lost == 1
    final = get(db, receipt.id)
    assert final.status == "failed" and final.error["retryable"] is False  # type: ignore[index]


def test_a_worker_finishing_after_its_lease_was_reclaimed_is_fenced_out(db: Database) -> None:
    receipt = create(db, call(spec("charge", effect="write", idempotent=False)))
    claim(db, receipt.id, lease_s=5)
    elapse(db, 10)
    swept(db)
    assert db.run(calls.finish(receipt.id, 1, Result("success", output="late"), actor="w")) is None
    assert get(db, receipt.id).error["code"] == "outcome_unknown"  # type: ignore[index]


def test_lost_message_is_republished_once_per_interval(db: Database) -> None:
    receipt = create(db, call())
    elapse(db, REPUBLISH_AFTER_S - 5)
    assert swept(db).republished == []  # its message may still arrive
    elapse(db, 6)
    assert [r.id for r in swept(db).republished] == [receipt.id]
    elapse(db, 1)
    assert swept(db).republished == []  # marked as published
    elapse(db, REPUBLISH_AFTER_S)
    assert [r.id for r in swept(db).republished] == [receipt.id]


def test_a_retry_left_to_the_sweeper_is_published_when_due(db: Database) -> None:
    receipt = create(db, call())
    claim(db, receipt.id, lease_s=30)
    db.run(calls.retry_later(receipt.id, 1, error("upstream_error", "503", retryable=True), delay_s=90,
                             published=False, actor="w"))
    elapse(db, 60)
    assert swept(db).republished == []
    elapse(db, 31)
    assert [r.id for r in swept(db).republished] == [receipt.id]


def test_running_and_terminal_receipts_are_not_republished(db: Database) -> None:
    running = create(db, call())
    done = create(db, call())
    claim(db, running.id, lease_s=3600)
    claim(db, done.id, lease_s=3600)
    db.run(calls.finish(done.id, 1, Result("success", output=1), actor="w"))
    elapse(db, REPUBLISH_AFTER_S + 1)
    assert swept(db).republished == []


def test_pending_past_its_deadline_expires(db: Database) -> None:
    receipt = create(db, call(deadline_s=60))
    elapse(db, 30)
    assert swept(db).expired == 0
    elapse(db, 31)
    report = swept(db)
    assert report.expired == 1
    assert report.republished == []
    final = get(db, receipt.id)
    assert final.status == "failed"
    assert final.error is not None and final.error["code"] == "expired"
    assert final.finished_at is not None


def test_a_retry_past_the_deadline_fails_with_its_last_error(db: Database) -> None:
    receipt = create(db, call(deadline_s=60))
    claim(db, receipt.id, lease_s=30)
    db.run(calls.retry_later(receipt.id, 1, error("upstream_error", "503", retryable=True), delay_s=10,
                             published=True, actor="w"))
    elapse(db, 61)
    swept(db)
    final = get(db, receipt.id)
    assert final.status == "failed"
    assert final.error["code"] == "upstream_error"  # type: ignore[index]
    assert final.error["retryable"] is False  # type: ignore[index]


def test_waiting_past_its_deadline_expires(db: Database) -> None:
    receipt = create(db, call(spec("ask", kind="function"), deadline_s=60), status="waiting")
    elapse(db, 61)
    assert swept(db).expired == 1
    final = get(db, receipt.id)
    assert final.status == "failed" and final.error["code"] == "expired"  # type: ignore[index]


def test_after_restart_every_lease_is_reclaimed_and_every_pending_receipt_resent(db: Database) -> None:
    running = create(db, call(spec("lookup")))
    write = create(db, call(spec("charge", effect="write", idempotent=False)))
    queued = create(db, call())
    claim(db, running.id, lease_s=3600)
    claim(db, write.id, lease_s=3600)
    report = swept(db, after_restart=True)
    assert (report.reclaimed, report.lost) == (1, 1)
    assert {r.id for r in report.republished} == {running.id, queued.id}
    assert get(db, write.id).error["code"] == "outcome_unknown"  # type: ignore[index]


def test_after_restart_a_retry_scheduled_for_later_is_sent_as_soon_as_it_is_due(db: Database) -> None:
    receipt = create(db, call())
    claim(db, receipt.id, lease_s=30)
    # The worker queued the retry with a countdown, which an in-memory broker loses in a restart.
    db.run(calls.retry_later(receipt.id, 1, error("upstream_error", "503", retryable=True), delay_s=20,
                             published=True, actor="w"))
    assert swept(db, after_restart=True).republished == []  # not due yet
    elapse(db, 21)
    assert [r.id for r in swept(db).republished] == [receipt.id]
