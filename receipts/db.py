"""Engines and transactions. Built from settings by a factory; nothing is created at import time."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
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
        since = record.info.get("idle_since")
        if since is None or time.monotonic() - since < IDLE_PING_S:
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


class Database:
    """An engine plus the one way to open a transaction."""

    def __init__(self, engine: Engine, statements: Engine | None = None) -> None:
        self.engine = engine
        # PostgreSQL: reads run in autocommit (no BEGIN/ROLLBACK round trips), and the hot
        # single-statement transitions on a pool of autocommit connections of their own.
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._statements = statements
        self._async_pool: AsyncConnectionPool[Any] | None = None

    @classmethod
    def from_settings(cls, settings: Settings, *, pool_size: int = 10) -> Database:
        url = settings.database_url
        if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
            Path(url.removeprefix("sqlite:///")).expanduser().resolve().parent.mkdir(
                parents=True, exist_ok=True
            )
        if url.startswith("postgresql"):
            statements = make_engine(url, pool_size=pool_size, isolation_level="AUTOCOMMIT")
            return cls(make_engine(url, pool_size=pool_size), statements)
        return cls(make_engine(url, pool_size=pool_size))

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

    def statement(self, sql: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """Run one statement in autocommit straight on a pooled psycopg connection; its first row.

        For the hot paths only (``pg_statements``): SQL written for psycopg, no SQLAlchemy
        compilation or result processing in between. Results come in binary format, which spares
        both ends formatting and parsing the row's timestamps and numbers as text.
        """
        if self._statements is None:
            raise RuntimeError("single statements need PostgreSQL")
        conn = self._statements.raw_connection()
        try:
            dbapi: psycopg.Connection[Any] = conn.dbapi_connection  # type: ignore[assignment]
            with dbapi.cursor(row_factory=dict_row, binary=True) as cursor:
                cursor.execute(sql, params)  # type: ignore[arg-type]
                return cursor.fetchone()
        except psycopg.OperationalError:
            conn.invalidate()  # a broken connection must not go back to the pool
            raise
        finally:
            conn.close()

    async def open_async(self, size: int) -> None:
        """Open a pool of ``size`` async connections for :meth:`astatement` (PostgreSQL only; else a no-op).

        Call it from the event loop that will use the pool; :meth:`close_async` closes it there.
        """
        if self._statements is None or self._async_pool is not None:
            return
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self.conninfo, min_size=1, max_size=size, kwargs={"autocommit": True}, open=False, name="statements")
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

    async def astatement(self, sql: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """:meth:`statement` awaited on the event loop, on a connection of the async pool.

        A connection that broke goes back to the pool as broken, and the pool replaces it.
        """
        if self._async_pool is None:
            raise RuntimeError("the async pool is not open (Database.open_async)")
        async with self._async_pool.connection() as conn, conn.cursor(row_factory=dict_row, binary=True) as cursor:
            await cursor.execute(sql, params)  # type: ignore[arg-type]
            return await cursor.fetchone()

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def after_fork(self) -> None:
        """Forget connections inherited from a parent process (without closing them under it)."""
        self.engine.dispose(close=False)
        if self._statements is not None:
            self._statements.dispose(close=False)

    def dispose(self) -> None:
        self.engine.dispose()
        if self._statements is not None:
            self._statements.dispose()
