"""The database's pools: connections the server dropped, idle checks, forks, and outages as Unavailable."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import psycopg
import pytest

from receipts.db import Database, Query, Steps, database, operation, subop
from receipts.errors import NotConfigured, Unavailable
from receipts.store import calls
from tests.support import services
from tests.support.factories import call


def database_name(db: Database) -> str:
    return db.url.rsplit("/", 1)[1]


def terminate_sessions(db: Database) -> int:
    """End every session of ``db``'s database, as a database restart would, and wait until they are gone."""
    with psycopg.connect(services.PG_ADMIN, autocommit=True) as admin:
        rows = admin.execute("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                             "WHERE datname = %s AND pid <> pg_backend_pid()", [database_name(db)]).fetchall()
    assert all(ended for (ended,) in rows)
    return len(rows)


def sessions(db: Database) -> set[int]:
    """The server's sessions of ``db`` (the pids ``pg_stat_activity`` shows)."""
    with psycopg.connect(services.PG_ADMIN, autocommit=True) as admin:
        rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
                             [database_name(db), db.name])
        return {pid for (pid,) in rows.fetchall()}


@operation
def _backend_pid() -> Steps[int]:
    row = yield Query("SELECT pg_backend_pid()")
    return int(row[0])


@operation
def _terminate_own_session(ended: list[int]) -> Steps[Any]:
    """Have the server end this operation's session under its statement (noting which one it was)."""
    ended.append((yield from subop(_backend_pid())))
    return (yield Query("SELECT pg_terminate_backend(pg_backend_pid())"))


def claimable(db: Database, actor: str = "test") -> bool:
    """Create a receipt and claim it: two operations, each on a connection from the pool."""
    receipt, _ = db.run(calls.create(call()))
    return db.run(calls.claim(receipt.id, lease_s=30, actor=actor)) is not None


# -- connections the server dropped ------------------------------------------------------------


def test_a_connection_terminated_while_idle_is_replaced_before_it_fails_a_call(db: Database) -> None:
    first = db.run(_backend_pid())
    assert terminate_sessions(db) >= 1
    assert claimable(db)  # used again well within IDLE_PING_S: the server's goodbye gave it away
    assert db.run(_backend_pid()) != first


def test_an_idle_connection_is_pinged_before_use_and_replaced_if_the_server_dropped_it(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    db.run(calls.create(call()))
    assert terminate_sessions(db) >= 1
    monkeypatch.setattr(database, "IDLE_PING_S", 0.0)  # every connection counts as idle: checked before use
    assert claimable(db)


def test_a_connection_broken_while_in_use_fails_one_call_and_is_not_reused(db: Database) -> None:
    ended: list[int] = []
    with pytest.raises(Unavailable):
        db.run(_terminate_own_session(ended))
    assert db.run(_backend_pid()) != ended[0]
    assert claimable(db)


def test_the_async_pool_replaces_terminated_connections_too(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> tuple[str, str]:
        await db.open_async(1)
        try:
            await db.arun(calls.create(call()))
            terminate_sessions(db)
            receipt, _ = await db.arun(calls.create(call()))  # within IDLE_PING_S: the goodbye gives it away
            terminate_sessions(db)
            monkeypatch.setattr(database, "IDLE_PING_S", 0.0)
            again, _ = await db.arun(calls.create(call()))
            return receipt.status, again.status
        finally:
            await db.close_async()

    assert asyncio.run(scenario()) == ("pending", "pending")


# -- outages ---------------------------------------------------------------------------------------


def unreachable(monkeypatch: pytest.MonkeyPatch) -> Database:
    """A database nobody listens for (port 9 on this host), with a short wait for a connection."""
    monkeypatch.setattr(database, "POOL_TIMEOUT_S", 1.0)
    monkeypatch.setattr(database, "CONNECT_TIMEOUT_S", 1)
    return Database("postgresql://postgres@127.0.0.1:9/toolrelay", pool_size=1, name="toolrelay-test")


def test_a_database_that_cannot_be_reached_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    db = unreachable(monkeypatch)
    try:
        with pytest.raises(Unavailable):
            db.run(calls.load("rcpt_any"))
        with pytest.raises(Unavailable):
            db.ping()
    finally:
        db.dispose()


def test_a_database_that_cannot_be_reached_is_unavailable_on_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    db = unreachable(monkeypatch)

    async def scenario() -> None:
        await db.open_async(1)
        try:
            with pytest.raises(Unavailable):
                await db.arun(calls.load("rcpt_any"))
            with pytest.raises(Unavailable):
                await db.aping()
        finally:
            await db.close_async()

    asyncio.run(scenario())


def test_a_url_that_is_not_postgresql_is_refused() -> None:
    with pytest.raises(NotConfigured):
        Database("sqlite:///toolrelay.db")
    assert Database("postgresql+psycopg://u@h:5432/d").conninfo == "postgresql://u@h:5432/d"


# -- forks and pool size -----------------------------------------------------------------------


def test_a_forked_child_opens_its_own_pool_and_leaves_the_parents_alone(db: Database) -> None:
    parent_session = db.run(_backend_pid())  # the parent's pool is open, with a session in it
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a prefork worker after worker_process_init
        code = 1
        try:
            db.after_fork()
            os.write(write_end, str(db.run(_backend_pid())).encode())
            code = 0 if claimable(db, "child") else 2
        finally:
            os._exit(code)
    os.close(write_end)
    child_session = int(os.read(read_end, 32))
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert child_session != parent_session
    assert parent_session in sessions(db)  # the child's exit did not end the parent's session
    for _ in range(3):
        assert claimable(db, "parent")


def test_statements_run_one_at_a_time_hold_one_connection(db: Database) -> None:
    """A prefork child runs one statement at a time: its pool must not open a second connection for it
    (the first statement, waiting for the pool's first connection, used to make the pool grow)."""
    for _ in range(20):
        assert claimable(db)
    assert len(sessions(db)) == 1
