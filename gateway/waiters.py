"""Long-poll support: wake requests waiting on a receipt as soon as it settles, without polling storms.

A trigger NOTIFYs ``toolrelay_receipts`` in the transaction that settles a receipt, whichever
process made it; one listener per gateway process, a task on its event loop, relays those to the
waiting requests. It
LISTENs only while requests wait (and for :data:`LINGER_S` after the last one), so a gateway nobody
long-polls is not woken for every receipt any worker settles. A slow periodic re-read covers the
gap while the listener reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import psycopg

from receipts.db import Database

log = logging.getLogger(__name__)
T = TypeVar("T")

CHANNEL = "toolrelay_receipts"
RECHECK_S = 2.0  # re-read while waiting, in case a notification was missed
LINGER_S = 30.0  # keep listening this long after the last waiter left: waits tend to come in runs
CHECK_S = 1.0  # how often the listener looks whether anyone still waits
READY_WAIT_S = 2.0  # how long a waiter waits for LISTEN (the connection may be down: the re-read covers)


class Waiters:
    """Futures keyed by receipt id, resolved on the event loop."""

    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Future[None]]] = defaultdict(set)
        self._listener: PostgresListener | None = None

    def attach(self, listener: PostgresListener) -> None:
        """Have :meth:`watch` make sure ``listener`` LISTENs before it lets a waiter read."""
        self._listener = listener

    @property
    def anyone_waiting(self) -> bool:
        return bool(self._waiting)

    @asynccontextmanager
    async def watch(self, receipt_id: str) -> AsyncIterator[asyncio.Future[None]]:
        """A future resolved at the next notification about ``receipt_id``; read the receipt inside.

        On entry the notification is registered and, with a listener, LISTEN is in effect, so a
        transition committed after the read cannot be missed.
        """
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[receipt_id].add(future)
        try:
            if self._listener is not None:
                await self._listener.listening()
            yield future
        finally:
            waiting = self._waiting.get(receipt_id)
            if waiting is not None:
                waiting.discard(future)
                if not waiting:
                    del self._waiting[receipt_id]

    def notify(self, receipt_id: str) -> None:
        """Wake everything waiting on ``receipt_id`` (call it on the event loop)."""
        for future in self._waiting.get(receipt_id, ()):
            if not future.done():
                future.set_result(None)


async def wait_until(waiters: Waiters, key: str, read: Callable[[], Awaitable[T]], done: Callable[[T], bool],
                     wait_s: float) -> T:
    """``read()`` again at each notification about ``key`` until ``done`` says yes or ``wait_s`` is over.

    Each read comes after the waiter is registered (and LISTEN is in effect), so a change in between
    is never missed: something that settles costs one read before the wait and one after.
    """
    if wait_s <= 0:
        return await read()
    deadline = time.monotonic() + wait_s
    while True:
        async with waiters.watch(key) as woken:
            value = await read()
            left = deadline - time.monotonic()
            if done(value) or left <= 0:
                return value
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken, min(left, RECHECK_S))


class PostgresListener:
    """LISTENs for settled receipts on the event loop, while requests wait, and relays them to :class:`Waiters`.

    On the loop, not on a thread of its own: a thread woken at every settled receipt would take turns
    at the GIL with the loop serving requests, which costs more than relaying the notification.
    """

    def __init__(self, db: Database, waiters: Waiters) -> None:
        self.db = db
        self.waiters = waiters
        self._task: asyncio.Task[None] | None = None
        self._wanted = asyncio.Event()  # a waiter asked for LISTEN
        self._listening = asyncio.Event()  # LISTEN is in effect on a live connection
        waiters.attach(self)

    async def listening(self) -> None:
        """Return once LISTEN is in effect, or after :data:`READY_WAIT_S` if it cannot be (no connection)."""
        if self._listening.is_set():
            return
        self._wanted.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listening.wait(), READY_WAIT_S)

    def start(self) -> None:
        """Start listening (call on the running loop)."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="receipt-listener")

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        delay = 0.5
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.db.conninfo, **self.db.connect_kwargs) as conn:
                    delay = 0.5
                    while True:
                        await self._wanted.wait()
                        await conn.execute(f"LISTEN {CHANNEL}")
                        self._listening.set()
                        await self._relay(conn)
                        # Nobody waited for LINGER_S. A waiter arriving from here on asks again.
                        self._listening.clear()
                        self._wanted.clear()
                        await conn.execute(f"UNLISTEN {CHANNEL}")
            except psycopg.Error as exc:
                self._listening.clear()
                log.warning("receipt listener lost its connection (%s); reconnecting in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def _relay(self, conn: psycopg.AsyncConnection[object]) -> None:
        """Relay notifications until nobody has waited for :data:`LINGER_S`."""
        quiet_since: float | None = None
        while True:
            async for note in conn.notifies(timeout=CHECK_S):
                self.waiters.notify(note.payload.split(":", 1)[0])
            if self.waiters.anyone_waiting:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= LINGER_S:
                return
