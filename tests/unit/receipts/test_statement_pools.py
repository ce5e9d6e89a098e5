"""The psycopg pools the hot statements run on: broken connections, idle checks, and forks."""

from __future__ import annotations

import asyncio
import os

import psycopg
import pytest

from receipts import db as db_module
from receipts.db import Database
from receipts.store.calls import ReceiptStore
from tests.support import services
from tests.support.factories import call


def terminate_sessions(db: Database) -> int:
    """End every session of ``db``'s database but this one, as a database restart would."""
    with psycopg.connect(services.PG_ADMIN, autocommit=True) as admin:
        rows = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE datname = %s AND pid <> pg_backend_pid()", [db.engine.url.database]).fetchall()
    return len(rows)


def sessions(db: Database) -> set[int]:
    with psycopg.connect(services.PG_ADMIN, autocommit=True) as admin:
        rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", [db.engine.url.database])
        return {pid for (pid,) in rows.fetchall()}


def test_a_connection_broken_while_idle_is_replaced_before_it_fails_a_call(pg_db: Database,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    store = ReceiptStore(pg_db)
    store.create(call())
    assert terminate_sessions(pg_db) >= 1
    monkeypatch.setattr(db_module, "IDLE_PING_S", 0.0)  # every connection counts as idle: checked before use
    receipt, _ = store.create(call())
    assert store.claim(receipt.id, lease_s=30, actor="test") is not None


def test_without_the_idle_check_the_broken_connection_fails_one_call_and_is_not_reused(pg_db: Database) -> None:
    store = ReceiptStore(pg_db)
    store.create(call())
    terminate_sessions(pg_db)
    with pytest.raises(psycopg.OperationalError):
        store.create(call())  # used again within IDLE_PING_S of its last statement: not checked
    receipt, _ = store.create(call())
    assert receipt.status == "pending"


def test_the_async_pool_checks_idle_connections_too(pg_db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ReceiptStore(pg_db)

    async def scenario() -> str:
        await pg_db.open_async(1)
        try:
            await store.create_pending(call())
            terminate_sessions(pg_db)
            monkeypatch.setattr(db_module, "IDLE_PING_S", 0.0)
            receipt, _ = await store.create_pending(call())
            return receipt.status
        finally:
            await pg_db.close_async()

    assert asyncio.run(scenario()) == "pending"


def backend_pid(db: Database) -> int:
    row = db.statement("SELECT pg_backend_pid()", {})
    assert row is not None
    return int(row[0])


def test_a_forked_child_opens_its_own_pool_and_leaves_the_parents_alone(pg_db: Database) -> None:
    store = ReceiptStore(pg_db)
    parent_session = backend_pid(pg_db)  # the parent's pool is open, with a session in it
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a prefork worker after worker_process_init
        code = 1
        try:
            pg_db.after_fork()
            os.write(write_end, str(backend_pid(pg_db)).encode())
            receipt, _ = store.create(call())
            code = 0 if store.claim(receipt.id, lease_s=30, actor="child") is not None else 2
        finally:
            os._exit(code)
    os.close(write_end)
    child_session = int(os.read(read_end, 32))
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert child_session != parent_session
    assert parent_session in sessions(pg_db)  # the child's exit did not end the parent's session
    for _ in range(3):
        receipt, _ = store.create(call())
        assert store.claim(receipt.id, lease_s=30, actor="parent") is not None


def test_statements_run_one_at_a_time_hold_one_connection(pg_db: Database) -> None:
    """A prefork child runs one statement at a time: its pool must not open a second connection for it
    (the first statement, waiting for the pool's first connection, used to make the pool grow)."""
    store = ReceiptStore(pg_db)
    for _ in range(20):
        receipt, _ = store.create(call())
        assert store.claim(receipt.id, lease_s=30, actor="test") is not None
    assert pg_db._statement_pool().get_stats()["pool_size"] == 1
