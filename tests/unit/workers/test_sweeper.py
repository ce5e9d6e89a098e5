"""The sweep task body: what the sweeper finds is re-sent to the receipt's queue."""

from __future__ import annotations

from receipts.db import Database
from receipts.settings import Settings
from receipts.store import calls
from tests.support import sql
from tests.support.factories import RecordingSender, call, spec
from workers.sweeper import sweep_once


def test_sweep_once_republishes_with_the_lease_and_time_limit(db: Database) -> None:
    receipt, _ = db.run(calls.create(call(spec("lookup", timeout_s=4))))
    sender = RecordingSender()
    report = sweep_once(db, sender, Settings(republish_after_s=0, lease_grace_s=2), after_restart=True)
    assert [r.id for r in report.republished] == [receipt.id]
    [message] = sender.sent
    assert message.name == "toolrelay.execute"
    assert message.args == [receipt.id, 6.0]
    assert message.options["queue"] == "tools"
    assert message.options["time_limit"] == 5.0  # between the attempt timeout and the lease
    assert message.options["countdown"] is None


def test_sweep_once_sends_nothing_when_nothing_is_lost(db: Database) -> None:
    db.run(calls.create(call()))
    sender = RecordingSender()
    assert sweep_once(db, sender, Settings(republish_after_s=30, lease_grace_s=2)).total == 0
    assert sender.sent == []


def test_sweep_once_resends_a_receipt_whose_lease_ran_out_by_the_databases_clock(db: Database) -> None:
    receipt, _ = db.run(calls.create(call(spec("lookup", timeout_s=4))))
    assert db.run(calls.claim(receipt.id, lease_s=3600, actor="w")) is not None
    sender = RecordingSender()
    settings = Settings(republish_after_s=30, lease_grace_s=2)
    assert sweep_once(db, sender, settings).total == 0  # the lease is good for an hour
    sql.execute(db, "UPDATE receipts SET lease_expires_at = now() - interval '1 second' WHERE id = %(id)s",
                id=receipt.id)
    report = sweep_once(db, sender, settings)
    assert (report.reclaimed, [r.id for r in report.republished]) == (1, [receipt.id])
    assert sender.executes() == [receipt.id]


def test_sweep_once_counts_what_it_did(db: Database) -> None:
    from prometheus_client import CollectorRegistry

    from workers.metrics import WorkerMetrics

    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    db.run(calls.create(call()))
    sweep_once(db, RecordingSender(), Settings(republish_after_s=0, lease_grace_s=2), after_restart=True,
               metrics=metrics)
    assert registry.get_sample_value("toolrelay_sweeper_actions_total", {"action": "republished"}) == 1
    assert registry.get_sample_value("toolrelay_sweeper_actions_total", {"action": "expired"}) == 0
