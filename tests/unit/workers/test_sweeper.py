"""The sweep task body: what the sweeper finds is re-sent to the receipt's queue."""

from __future__ import annotations

from receipts.db import Database
from receipts.store.calls import ReceiptStore
from receipts.store.sweeps import Sweeper
from tests.support.factories import RecordingSender, call, spec
from workers.sweeper import sweep_once


def test_sweep_once_republishes_with_the_lease_and_time_limit(sqlite_db: Database) -> None:
    store = ReceiptStore(sqlite_db)
    receipt, _ = store.create(call(spec("lookup", timeout_s=4)))
    sender = RecordingSender()
    report = sweep_once(Sweeper(store, republish_after_s=0), sender, grace_s=2, after_restart=True)
    assert [r.id for r in report.republished] == [receipt.id]
    [message] = sender.sent
    assert message.name == "toolrelay.execute"
    assert message.args == [receipt.id, 6.0]
    assert message.options["queue"] == "tools"
    assert message.options["time_limit"] == 5.0  # between the attempt timeout and the lease
    assert message.options["countdown"] is None


def test_sweep_once_sends_nothing_when_nothing_is_lost(sqlite_db: Database) -> None:
    store = ReceiptStore(sqlite_db)
    store.create(call())
    sender = RecordingSender()
    assert sweep_once(Sweeper(store, republish_after_s=30), sender, grace_s=2).total == 0
    assert sender.sent == []
