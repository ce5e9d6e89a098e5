"""Long-poll wake-ups: the PostgreSQL trigger NOTIFYs settled receipts and the listener relays them
while requests wait."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator

import pytest

from gateway import waiters as waiters_module
from gateway.waiters import CHANNEL, PostgresListener, Waiters
from receipts.db import Database
from receipts.store import calls
from receipts.store.calls import Result
from tests.support import sql
from tests.support.factories import call


class RecordingWaiters(Waiters):
    def __init__(self) -> None:
        super().__init__()
        self.heard: list[str] = []

    def notify(self, receipt_id: str) -> None:
        self.heard.append(receipt_id)
        super().notify(receipt_id)


def listener_statement(db: Database, *, not_pid: int = 0) -> str | None:
    """The last statement of the listener's session: ``LISTEN ...`` or ``UNLISTEN ...`` (None: no session);
    ``not_pid``: a backend to leave out (one that was terminated, which may linger a moment)."""
    query: str | None = sql.value(db, "SELECT query FROM pg_stat_activity WHERE datname = current_database() "
                                      "AND query ~ '^(UN)?LISTEN ' AND pid <> pg_backend_pid() "
                                      "AND pid <> %(not_pid)s", not_pid=not_pid)
    return query


def wait_until_listening(db: Database, timeout: float = 30, *, listening: bool = True, not_pid: int = 0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (listener_statement(db, not_pid=not_pid) or "").startswith("LISTEN" if listening else "UNLISTEN"):
            return
        time.sleep(0.05)
    raise AssertionError(f"the listener never issued {'LISTEN' if listening else 'UNLISTEN'}")


def notify(db: Database, receipt_id: str) -> None:
    sql.one(db, "SELECT pg_notify(%(channel)s, %(payload)s)", channel=CHANNEL, payload=f"{receipt_id}:success")


def test_a_settled_receipt_wakes_its_waiter_through_postgres(db: Database) -> None:
    # No in-process subscription: only NOTIFY can wake the waiter.
    receipt, _ = db.run(calls.create(call()))
    waiters = RecordingWaiters()

    async def scenario() -> None:
        # watch() LISTENs before it lets the waiter read
        async with listening_for(db, waiters), waiters.watch(receipt.id) as woken:
            claimed = await asyncio.to_thread(db.run, calls.claim(receipt.id, lease_s=30, actor="w"))
            assert claimed is not None
            finisher = threading.Timer(
                0.2, lambda: db.run(calls.finish(receipt.id, 1, Result("success", output=1), actor="w")))
            finisher.start()
            await asyncio.wait_for(woken, 10)

    asyncio.run(scenario())
    # pending -> running announces nothing; the terminal transition is heard exactly once.
    assert waiters.heard == [receipt.id]


@contextlib.asynccontextmanager
async def listening_for(db: Database, waiters: Waiters) -> AsyncIterator[PostgresListener]:
    """A listener on ``db`` relaying to ``waiters``, running on this loop until the block ends."""
    listener = PostgresListener(db, waiters)
    listener.start()
    try:
        yield listener
    finally:
        await listener.aclose()


async def cancel_and_wait(db: Database, waiters: Waiters) -> str:
    """Create a receipt, cancel it, and wait (at most 10 s) for the wake-up; its id."""
    receipt, _ = await asyncio.to_thread(db.run, calls.create(call()))
    async with waiters.watch(receipt.id) as woken:
        await asyncio.to_thread(db.run, calls.cancel(receipt.tenant_id, receipt.id))
        await asyncio.wait_for(woken, 10)
    return receipt.id


def test_a_cancel_wakes_its_waiter_through_postgres(db: Database) -> None:
    waiters = RecordingWaiters()

    async def scenario() -> str:
        async with listening_for(db, waiters):
            return await cancel_and_wait(db, waiters)

    receipt_id = asyncio.run(scenario())
    assert waiters.heard == [receipt_id]


def test_the_listener_reconnects_after_losing_its_connection(db: Database) -> None:
    waiters = RecordingWaiters()

    def kill_listener_backend() -> int:
        killed = sql.rows(db, "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE datname = current_database() AND query LIKE 'LISTEN %'")
        assert [ended for _, ended in killed] == [True]
        return int(killed[0][0])

    async def scenario() -> str:
        # A request waits all along, so the listener LISTENs throughout.
        async with listening_for(db, waiters), waiters.watch("rcpt_someone_else"):
            killed = await asyncio.to_thread(kill_listener_backend)
            # LISTENing again, on a new connection (the terminated backend may still be listed a moment).
            await asyncio.to_thread(wait_until_listening, db, not_pid=killed)
            return await cancel_and_wait(db, waiters)

    assert asyncio.run(scenario()) in waiters.heard


def test_notify_without_a_waiter_is_harmless() -> None:
    waiters = Waiters()
    waiters.notify("rcpt_nobody")

    async def scenario() -> None:
        waiters.notify("rcpt_nobody")
        async with waiters.watch("rcpt_a") as woken:
            waiters.notify("rcpt_a")
            await asyncio.wait_for(woken, 5)
        assert waiters._waiting == {}  # noqa: SLF001 - nothing left behind

    asyncio.run(scenario())


def test_the_listener_listens_only_while_requests_wait(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gateway nobody long-polls is not woken for every settled receipt; a waiter turns LISTEN on."""
    monkeypatch.setattr(waiters_module, "LINGER_S", 0.3)
    monkeypatch.setattr(waiters_module, "CHECK_S", 0.1)
    waiters = RecordingWaiters()

    async def scenario() -> None:
        async with listening_for(db, waiters):
            await asyncio.sleep(0.3)
            assert await asyncio.to_thread(listener_statement, db) is None  # connected, never LISTENed
            await asyncio.to_thread(notify, db, "rcpt_before")
            async with waiters.watch("rcpt_waited_for") as woken:
                assert (await asyncio.to_thread(listener_statement, db) or "").startswith("LISTEN")
                await asyncio.to_thread(notify, db, "rcpt_waited_for")
                await asyncio.wait_for(woken, 10)
            await asyncio.to_thread(wait_until_listening, db, listening=False)  # UNLISTEN after the linger
            await asyncio.to_thread(notify, db, "rcpt_after")
            async with waiters.watch("rcpt_again") as woken:  # LISTENs again
                await asyncio.to_thread(notify, db, "rcpt_again")
                await asyncio.wait_for(woken, 10)

    asyncio.run(scenario())
    assert waiters.heard == ["rcpt_waited_for", "rcpt_again"]
