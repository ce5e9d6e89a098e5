"""Engines and transactions. Built from settings by a factory; nothing is created at import time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DisconnectionError

from receipts.settings import Settings


def utcnow() -> datetime:
    """The current time, timezone-aware UTC (the only clock the store uses)."""
    return datetime.now(UTC)


def dialect_insert(conn: Connection) -> Any:
    """The backend's INSERT construct, which knows ON CONFLICT (PostgreSQL and SQLite both do)."""
    return postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert


def make_engine(url: str, *, pool_size: int = 10, **options: Any) -> Engine:
    """An engine for ``url`` with the settings each backend needs.

    SQLite runs in WAL mode with a busy timeout, and every transaction starts with ``BEGIN
    IMMEDIATE`` so two writers queue for the lock instead of failing on upgrade.
    """
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        _tune_sqlite(engine)
        return engine
    engine = create_engine(url, pool_size=pool_size, max_overflow=pool_size * 2, pool_recycle=1800, **options)
    _ping_when_idle(engine)
    return engine


IDLE_PING_S = 10.0


def sat_idle(since: float | None) -> bool:
    """Whether a pooled connection idle since ``since`` (monotonic; None: it was just opened) is to be
    pinged before its next use: the one rule of the engine's pool and the statement pools."""
    return since is not None and time.monotonic() - since >= IDLE_PING_S


def _ping_when_idle(engine: Engine) -> None:
    """Test a pooled connection before use only if it sat idle: a busy pool pays no round trip for it.

    A connection that broke while in use fails its statement; the transaction is rolled back and the
    caller sees an error (nothing half-written), and the pool drops the connection.
    """

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if not sat_idle(record.info.get("idle_since")):
            return
        try:
            dbapi_connection.execute("SELECT 1")
            dbapi_connection.rollback()
        except Exception as exc:
            raise DisconnectionError(str(exc)) from exc  # the pool retries with a new connection


def _tune_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # let SQLAlchemy's begin() below issue BEGIN
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


class StatementConnection(psycopg.Connection[Any]):
    """A pooled connection for the hot statements: one binary cursor, reused, and when it was last used."""

    last_used = 0.0  # never used: pinged on its first use, since the pool may have opened it long before

    @cached_property
    def statement_cursor(self) -> psycopg.Cursor[Any]:
        # Reused for every statement: creating a cursor costs about as much as running one.
        return self.cursor(binary=True)

    @staticmethod
    def check_if_idle(conn: StatementConnection) -> None:
        """The pool's ``check``: ping before use only a connection that sat idle (the engine's rule,
        :func:`_ping_when_idle`), so one that broke meanwhile (a database restart, say) is replaced
        before it fails a statement, and a busy pool pays no round trip for it."""
        if sat_idle(conn.last_used):
            conn.execute("SELECT 1")


class AsyncStatementConnection(psycopg.AsyncConnection[Any]):
    """:class:`StatementConnection` for the event loop."""

    last_used = 0.0

    @cached_property
    def statement_cursor(self) -> psycopg.AsyncCursor[Any]:
        return self.cursor(binary=True)

    @staticmethod
    async def check_if_idle(conn: AsyncStatementConnection) -> None:
        if sat_idle(conn.last_used):
            await conn.execute("SELECT 1")


class Database:
    """An engine plus the one way to open a transaction."""

    def __init__(self, engine: Engine, *, pool_size: int = 10) -> None:
        self.engine = engine
        # PostgreSQL: reads run in autocommit (no BEGIN/ROLLBACK round trips), and the hot
        # single-statement transitions on psycopg pools of autocommit connections of their own.
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._pool_size = pool_size
        self._pool: ConnectionPool[StatementConnection] | None = None
        self._pool_lock = threading.Lock()
        self._inherited: list[ConnectionPool[StatementConnection]] = []
        self._async_pool: AsyncConnectionPool[AsyncStatementConnection] | None = None

    @classmethod
    def from_settings(cls, settings: Settings, *, pool_size: int = 10) -> Database:
        url = settings.database_url
        if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
            Path(url.removeprefix("sqlite:///")).expanduser().resolve().parent.mkdir(
                parents=True, exist_ok=True
            )
        return cls(make_engine(url, pool_size=pool_size), pool_size=pool_size)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def conninfo(self) -> str:
        """The database URL as libpq takes it, for connections made with psycopg itself."""
        return self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A connection inside a transaction: committed on exit, rolled back on error."""
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection for reads: autocommit on PostgreSQL (one round trip per query)."""
        engine = self._autocommit if self.dialect == "postgresql" else self.engine
        with engine.connect() as conn:
            yield conn

    def statement(self, sql: str, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """Run one statement in autocommit on a pooled psycopg connection; its first row, as a tuple.

        For the hot paths only (``pg_statements``, whose statements name the columns they return):
        SQL written for psycopg, no SQLAlchemy compilation, result processing or pool events in
        between. Results come in binary format, which spares both ends formatting and parsing the
        row's timestamps and numbers as text. The pool opens on first use, so a process forked
        before that (a prefork worker child) opens its own; a connection that broke is not reused.
        """
        with self._statement_pool().connection() as conn:
            cursor = conn.statement_cursor
            cursor.execute(sql, params)  # type: ignore[arg-type]
            row = cursor.fetchone()
            conn.last_used = time.monotonic()
            return row

    def _statement_pool(self) -> ConnectionPool[StatementConnection]:
        pool = self._pool
        if pool is not None:
            return pool
        if self.dialect != "postgresql":
            raise RuntimeError("single statements need PostgreSQL")
        with self._pool_lock:
            if self._pool is None:
                self._pool = ConnectionPool(
                    self.conninfo, connection_class=StatementConnection, min_size=1, max_size=self._pool_size,
                    kwargs={"autocommit": True}, check=StatementConnection.check_if_idle, num_workers=1, open=True,
                    name="statements")
                # Until its first connection is up, a statement would wait for it and make the pool grow:
                # a prefork child, which runs one statement at a time, would hold two connections.
                self._pool.wait()
            return self._pool

    async def open_async(self, size: int) -> None:
        """Open a pool of ``size`` async connections for :meth:`astatement` (PostgreSQL only; else a no-op).

        Call it from the event loop that will use the pool; :meth:`close_async` closes it there.
        """
        if self.dialect != "postgresql" or self._async_pool is not None:
            return
        pool = AsyncConnectionPool(
            self.conninfo, connection_class=AsyncStatementConnection, min_size=1, max_size=size,
            kwargs={"autocommit": True}, check=AsyncStatementConnection.check_if_idle, open=False, name="statements")
        await pool.open()
        self._async_pool = pool

    async def close_async(self) -> None:
        pool, self._async_pool = self._async_pool, None
        if pool is not None:
            await pool.close()

    @property
    def async_ready(self) -> bool:
        """Whether :meth:`astatement` can run (the async pool is open)."""
        return self._async_pool is not None

    async def astatement(self, sql: str, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """:meth:`statement` awaited on the event loop, on a connection of the async pool."""
        if self._async_pool is None:
            raise RuntimeError("the async pool is not open (Database.open_async)")
        async with self._async_pool.connection() as conn:
            cursor = conn.statement_cursor
            await cursor.execute(sql, params)  # type: ignore[arg-type]
            row = await cursor.fetchone()
            conn.last_used = time.monotonic()
            return row

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def after_fork(self) -> None:
        """Forget connections inherited from a parent process (without closing them under it).

        An inherited statement pool is kept referenced, never closed or collected here: closing it
        would stop threads that did not survive the fork and end sessions that are the parent's.
        """
        self.engine.dispose(close=False)
        self._pool_lock = threading.Lock()  # another thread of the parent may have held it
        if self._pool is not None:
            self._inherited.append(self._pool)
            self._pool = None

    def dispose(self) -> None:
        self.engine.dispose()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
