"""The database: pooled psycopg connections, and the two drivers that run store operations.

There is one implementation of every store operation (a generator, :mod:`receipts.db.operations`)
and two ways to run one: :meth:`Database.run` blocks (workers, the sweeper, the CLI) and
:meth:`Database.arun` is awaited on an event loop (the gateway, the dispatcher), with no thread hop.

Connections are autocommit: a single-statement operation costs one round trip, no BEGIN/COMMIT.
Each keeps one binary raw-query cursor for all its statements (creating a cursor costs about as
much as running a statement; each statement's placeholders are converted once, see
:mod:`receipts.db.placeholders`), and results come in binary format, which spares both ends formatting and
parsing timestamps and numbers as text. psycopg prepares a statement on the server once it has run a
few times on a connection, so the hot statements are parsed and planned once per connection.

Pools open on first use, in the process that uses them: a prefork worker child, forked before that,
opens its own (see :meth:`Database.after_fork`).

A connection the server dropped (a restart, an administrator's ``pg_terminate_backend``) is noticed
before it is handed out, without a round trip: the server's farewell makes its socket readable while
it sits idle. A connection idle for :data:`IDLE_PING_S` is also pinged, for networks that drop idle
connections silently. A connection that breaks while in use fails its operation with
:class:`~receipts.errors.Unavailable` (nothing half-written: a transition is one statement or one
transaction), and the pool discards it.
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import Any, TypeVar

import psycopg
from psycopg.pq import Format, TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from receipts.db.operations import Announce, Op, Query, Steps, operation
from receipts.db.placeholders import raw
from receipts.errors import NotConfigured, Unavailable
from receipts.jsoncodec import ADAPTERS
from receipts.settings import Settings

T = TypeVar("T")
Listener = Callable[[Announce], None]

IDLE_PING_S = 10.0
CONNECT_TIMEOUT_S = 5
POOL_TIMEOUT_S = 10.0
# How long a pool retries a connection that failed (pausing 1 s, 2 s, 4 s... between attempts)
# before it gives up; the next request that needs a connection then starts a new attempt at once.
# psycopg_pool's default (5 min) lets the pauses grow with an outage, so once PostgreSQL is back the
# next attempt could be further away than a request waits (POOL_TIMEOUT_S): the first requests after
# the outage failed too. Half a request's wait keeps every pause within it.
RECONNECT_S = POOL_TIMEOUT_S / 2


def conninfo_of(url: str) -> str:
    """A libpq URL from a ``postgresql://`` or SQLAlchemy ``postgresql+psycopg://`` one."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+", 1)[0] not in ("postgresql", "postgres"):
        raise NotConfigured(f"TOOLRELAY_DATABASE_URL must be a PostgreSQL URL (postgresql://...), not {scheme!r}")
    return f"postgresql://{rest}"


def _needs_replacing(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], last_used: float) -> bool:
    """Whether a pooled connection is broken or has sat idle long enough to be pinged first.

    An idle connection has nothing to read: a readable socket means the server sent its goodbye
    (or something this connection never asked for), so the connection is not worth keeping.
    """
    if conn.closed or conn.broken:
        return True
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:
        raise psycopg.OperationalError("the server closed this idle connection")
    return time.monotonic() - last_used >= IDLE_PING_S


class StatementConnection(psycopg.Connection[Any]):
    """A pooled connection with one binary cursor, reused, and when it was last used."""

    last_used = 0.0  # never used: pinged on its first use, since the pool may have opened it long before

    @cached_property
    def statement_cursor(self) -> psycopg.RawCursor[Any]:
        cursor = psycopg.RawCursor(self)  # $n placeholders: see receipts.db.placeholders
        cursor.format = Format.BINARY
        return cursor

    @staticmethod
    def check(conn: StatementConnection) -> None:
        """The pool's check before handing a connection out (see :func:`_needs_replacing`).

        A connection the server closed is closed here too before the check fails: the pool discards
        a connection that failed its check only if it is closed, and puts an open one back.
        """
        try:
            stale = _needs_replacing(conn, conn.last_used)
        except psycopg.OperationalError:
            conn.close()
            raise
        if stale:
            conn.execute("SELECT 1")


class AsyncStatementConnection(psycopg.AsyncConnection[Any]):
    """:class:`StatementConnection` for an event loop."""

    last_used = 0.0

    @cached_property
    def statement_cursor(self) -> psycopg.AsyncRawCursor[Any]:
        cursor = psycopg.AsyncRawCursor(self)
        cursor.format = Format.BINARY
        return cursor

    @staticmethod
    async def check(conn: AsyncStatementConnection) -> None:
        try:
            stale = _needs_replacing(conn, conn.last_used)
        except psycopg.OperationalError:
            await conn.close()  # closed, the pool discards it (see StatementConnection.check)
            raise
        if stale:
            await conn.execute("SELECT 1")


def _result(cursor: psycopg.Cursor[Any], query: Query) -> Any:
    if query.fetch == "one":
        return cursor.fetchone()
    if query.fetch == "all":
        return cursor.fetchall()
    if query.fetch == "rowcount":
        return cursor.rowcount
    return None


async def _aresult(cursor: psycopg.AsyncCursor[Any], query: Query) -> Any:
    if query.fetch == "one":
        return await cursor.fetchone()
    if query.fetch == "all":
        return await cursor.fetchall()
    if query.fetch == "rowcount":
        return cursor.rowcount
    return None


def _refuse_failed_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Fail an atomic operation that handled an error of one of its statements and went on to return.

    After a failed statement PostgreSQL keeps nothing of the transaction and turns its COMMIT into a
    ROLLBACK without an error: returning normally would report writes that never happened.
    """
    if conn.info.transaction_status == TransactionStatus.INERROR:
        raise psycopg.errors.InFailedSqlTransaction("a statement of this transaction failed and the operation "
                                                    "went on: it was rolled back, nothing was committed")


@contextmanager
def _unavailable_on_connection_errors(op: Op[Any]) -> Iterator[None]:
    """Connection failures and pool exhaustion as :class:`Unavailable`; the operation is closed."""
    try:
        yield
    except psycopg.OperationalError as exc:
        op.steps.close()
        raise Unavailable(f"the database is unavailable: {str(exc).strip() or type(exc).__name__}") from exc
    except PoolTimeout as exc:
        op.steps.close()
        raise Unavailable("no database connection became free in time") from exc


class Database:
    """PostgreSQL: a blocking pool and an event-loop pool of autocommit connections, and listeners.

    ``name`` becomes the connections' ``application_name`` (what ``pg_stat_activity`` shows).
    """

    def __init__(self, url: str, *, pool_size: int = 10, name: str = "toolrelay") -> None:
        self.url = url
        self.conninfo = conninfo_of(url)
        self.pool_size = pool_size
        self.name = name
        self._pool: ConnectionPool[StatementConnection] | None = None
        self._pool_lock = threading.Lock()
        self._inherited: list[ConnectionPool[StatementConnection]] = []
        self._async_pool: AsyncConnectionPool[AsyncStatementConnection] | None = None
        self._listeners: list[Listener] = []

    @classmethod
    def from_settings(cls, settings: Settings, *, pool_size: int = 10, name: str = "toolrelay") -> Database:
        """The database of ``settings``; NotConfigured when ``TOOLRELAY_DATABASE_URL`` is not set."""
        if not settings.database_url:
            raise NotConfigured("TOOLRELAY_DATABASE_URL is not set: point it at PostgreSQL "
                                "(postgresql://user:password@host:5432/toolrelay), or run `toolrelay dev`, "
                                "which starts an embedded PostgreSQL")
        return cls(settings.database_url, pool_size=pool_size, name=name)

    @property
    def connect_kwargs(self) -> dict[str, Any]:
        """What every connection of this database is opened with (also for LISTEN connections)."""
        return {"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S, "application_name": self.name,
                "options": "-c timezone=UTC", "context": ADAPTERS}

    # -- listeners ------------------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(announce)`` in this process for what every committed operation announces."""
        self._listeners.append(listener)

    def _announce(self, announced: list[Announce]) -> None:
        for item in announced:
            for listener in self._listeners:
                listener(item)

    # -- the blocking driver --------------------------------------------------------------------

    def run(self, op: Op[T], *, wait_s: float | None = None) -> T:
        """Run ``op`` to its end on a pooled connection (in one transaction if it is atomic).

        ``wait_s`` bounds the wait for a connection (by default :data:`POOL_TIMEOUT_S`): a caller with a
        deadline of its own (a worker before its hard time limit) gets Unavailable in time instead.
        """
        announced: list[Announce] = []
        wait = POOL_TIMEOUT_S if wait_s is None else max(min(wait_s, POOL_TIMEOUT_S), 0.01)
        with _unavailable_on_connection_errors(op), self._sync_pool(wait).connection(timeout=wait) as conn:
            if op.atomic:
                with conn.transaction():
                    value = self._drive(op, conn.statement_cursor, announced)
                    _refuse_failed_transaction(conn)
            else:
                value = self._drive(op, conn.statement_cursor, announced)
            conn.last_used = time.monotonic()
        self._announce(announced)
        return value

    @staticmethod
    def _drive(op: Op[T], cursor: psycopg.Cursor[Any], announced: list[Announce]) -> T:
        steps, result, failure = op.steps, None, None
        while True:
            try:
                step = steps.send(result) if failure is None else steps.throw(failure)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            result = failure = None
            if isinstance(step, Announce):
                announced.append(step)
                continue
            try:
                cursor.execute(*raw(step.sql, step.params), prepare=None if step.prepared else False)
            except psycopg.OperationalError:
                raise
            except psycopg.Error as exc:  # e.g. a constraint: thrown into the operation, which may handle it
                failure = exc
                continue
            result = _result(cursor, step)

    def _sync_pool(self, wait_s: float = POOL_TIMEOUT_S) -> ConnectionPool[StatementConnection]:
        pool = self._pool
        if pool is not None:
            return pool
        with self._pool_lock:
            if self._pool is None:
                pool = ConnectionPool(
                    self.conninfo, connection_class=StatementConnection, min_size=1, max_size=self.pool_size,
                    kwargs=self.connect_kwargs, check=StatementConnection.check, num_workers=1,
                    timeout=POOL_TIMEOUT_S, reconnect_timeout=RECONNECT_S, open=True, name=f"{self.name}-sync")
                # Until its first connection is up, an operation would wait for it and make the pool grow:
                # a prefork child, which runs one operation at a time, would hold two connections. On a
                # timeout wait() closes the pool, and the next operation tries with a new one.
                pool.wait(wait_s)
                self._pool = pool
            return self._pool

    # -- the event-loop driver ------------------------------------------------------------------

    async def open_async(self, size: int) -> None:
        """Open the event loop's pool of ``size`` connections (call it on the loop that will use it)."""
        if self._async_pool is not None:
            return
        pool = AsyncConnectionPool(
            self.conninfo, connection_class=AsyncStatementConnection, min_size=1, max_size=size,
            kwargs=self.connect_kwargs, check=AsyncStatementConnection.check, timeout=POOL_TIMEOUT_S,
            reconnect_timeout=RECONNECT_S, open=False, name=f"{self.name}-async")
        await pool.open()
        self._async_pool = pool

    async def close_async(self) -> None:
        pool, self._async_pool = self._async_pool, None
        if pool is not None:
            await pool.close()

    async def arun(self, op: Op[T]) -> T:
        """:meth:`run`, awaited on the event loop that opened the async pool (:meth:`open_async`)."""
        pool = self._async_pool
        if pool is None:
            op.steps.close()
            raise RuntimeError("the async pool is not open (Database.open_async)")
        announced: list[Announce] = []
        with _unavailable_on_connection_errors(op):
            async with pool.connection() as conn:
                if op.atomic:
                    async with conn.transaction():
                        value = await self._adrive(op, conn.statement_cursor, announced)
                        _refuse_failed_transaction(conn)
                else:
                    value = await self._adrive(op, conn.statement_cursor, announced)
                conn.last_used = time.monotonic()
        self._announce(announced)
        return value

    @staticmethod
    async def _adrive(op: Op[T], cursor: psycopg.AsyncCursor[Any], announced: list[Announce]) -> T:
        steps, result, failure = op.steps, None, None
        while True:
            try:
                step = steps.send(result) if failure is None else steps.throw(failure)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            result = failure = None
            if isinstance(step, Announce):
                announced.append(step)
                continue
            try:
                await cursor.execute(*raw(step.sql, step.params), prepare=None if step.prepared else False)
            except psycopg.OperationalError:
                raise
            except psycopg.Error as exc:
                failure = exc
                continue
            result = await _aresult(cursor, step)

    # -- lifecycle ------------------------------------------------------------------------------

    def ping(self) -> None:
        """One round trip; raises Unavailable when the database does not answer."""
        self.run(_ping())

    async def aping(self) -> None:
        await self.arun(_ping())

    def after_fork(self) -> None:
        """Forget the pool inherited from a parent process (without closing it under the parent).

        The inherited pool is kept referenced, never closed or collected here: closing it would stop
        threads that did not survive the fork and end sessions that are the parent's.
        """
        self._pool_lock = threading.Lock()  # another thread of the parent may have held it
        if self._pool is not None:
            self._inherited.append(self._pool)
            self._pool = None

    def dispose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


@operation
def _ping() -> Steps[None]:
    yield Query("SELECT 1")
