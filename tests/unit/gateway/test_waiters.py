"""Long-poll wake-ups: the PostgreSQL trigger NOTIFYs settled receipts and the listener relays them."""

from __future__ import annotations

import asyncio
import threading
import time

from sqlalchemy import text

from gateway.waiters import PostgresListener, Waiters
from receipts.db import Database
from receipts.store import Outcome, ReceiptStore
from tests.support.factories import call


class RecordingWaiters(Waiters):
    def __init__(self) -> None:
        super().__init__()
        self.heard: list[str] = []

    def notify(self, receipt_id: str) -> None:
        self.heard.append(receipt_id)
        super().notify(receipt_id)


def wait_until_listening(db: Database, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with db.engine.connect() as conn:
            listening = conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'"
            )).scalar_one()
        if listening:
            return
        time.sleep(0.05)
    raise AssertionError("the listener never issued LISTEN")


def test_a_settled_receipt_wakes_its_waiter_through_postgres(pg_db: Database) -> None:
    store = ReceiptStore(pg_db)  # no in-process subscription: only NOTIFY can wake the waiter
    receipt, _ = store.create(call())
    waiters = RecordingWaiters()
    listener = listener_on(pg_db, waiters)

    async def scenario() -> None:
        waiters.bind(asyncio.get_running_loop())
        listener.start()
        try:
            await asyncio.to_thread(wait_until_listening, pg_db)
            with waiters.watch(receipt.id) as woken:
                claimed = await asyncio.to_thread(store.claim, receipt.id, lease_s=30, actor="w")
                assert claimed is not None
                finisher = threading.Timer(
                    0.2, lambda: store.finish(receipt.id, 1, Outcome("success", output=1), actor="w"))
                finisher.start()
                await asyncio.wait_for(woken, 10)
        finally:
            await listener.aclose()

    asyncio.run(scenario())
    # pending -> running announces nothing; the terminal transition is heard exactly once.
    assert waiters.heard == [receipt.id]


def listener_on(db: Database, waiters: Waiters) -> PostgresListener:
    return PostgresListener(db.conninfo, waiters)


async def cancel_and_wait(store: ReceiptStore, waiters: Waiters) -> str:
    """Create a receipt, cancel it, and wait (at most 10 s) for the wake-up; its id."""
    receipt, _ = await asyncio.to_thread(store.create, call())
    with waiters.watch(receipt.id) as woken:
        await asyncio.to_thread(store.cancel, receipt.tenant_id, receipt.id)
        await asyncio.wait_for(woken, 10)
    return receipt.id


def test_a_cancel_wakes_its_waiter_through_postgres(pg_db: Database) -> None:
    store = ReceiptStore(pg_db)
    waiters = RecordingWaiters()
    listener = listener_on(pg_db, waiters)

    async def scenario() -> str:
        waiters.bind(asyncio.get_running_loop())
        listener.start()
        try:
            await asyncio.to_thread(wait_until_listening, pg_db)
            return await cancel_and_wait(store, waiters)
        finally:
            await listener.aclose()

    receipt_id = asyncio.run(scenario())
    assert waiters.heard == [receipt_id]


def test_the_listener_reconnects_after_losing_its_connection(pg_db: Database) -> None:
    store = ReceiptStore(pg_db)
    waiters = RecordingWaiters()
    listener = listener_on(pg_db, waiters)

    def kill_listener_backend() -> None:
        with pg_db.engine.connect() as conn:
            killed = conn.execute(text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN %'")).scalars().all()
            conn.commit()
        assert killed == [True]

    async def scenario() -> str:
        waiters.bind(asyncio.get_running_loop())
        listener.start()
        try:
            await asyncio.to_thread(wait_until_listening, pg_db)
            await asyncio.to_thread(kill_listener_backend)
            await asyncio.sleep(0.2)
            await asyncio.to_thread(wait_until_listening, pg_db)  # LISTENing again, on a new connection
            return await cancel_and_wait(store, waiters)
        finally:
            await listener.aclose()

    assert asyncio.run(scenario()) in waiters.heard


def test_notify_without_a_waiter_or_a_loop_is_harmless() -> None:
    waiters = Waiters()
    waiters.notify("rcpt_nobody")  # not bound yet

    async def scenario() -> None:
        waiters.bind(asyncio.get_running_loop())
        waiters.notify("rcpt_nobody")
        with waiters.watch("rcpt_a") as woken:
            waiters.notify("rcpt_a")
            await asyncio.wait_for(woken, 5)
        assert waiters._waiting == {}  # noqa: SLF001 - nothing left behind

    asyncio.run(scenario())
