"""Long-poll support: wake requests waiting on a receipt as soon as it settles, without polling storms.

In-process transitions (the embedded mode, or this gateway's own cancel) notify directly. On
PostgreSQL a trigger NOTIFYs ``toolrelay_receipts`` in the transaction that settles a receipt; one
listener per gateway process, a task on its event loop, relays those to the waiting requests. A
slow periodic re-read covers the gap while the listener reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

log = logging.getLogger(__name__)

CHANNEL = "toolrelay_receipts"


class Waiters:
    """Futures keyed by receipt id, resolved from any thread."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: dict[str, set[asyncio.Future[None]]] = defaultdict(set)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @contextmanager
    def watch(self, receipt_id: str) -> Iterator[asyncio.Future[None]]:
        """A future resolved at the next notification about ``receipt_id``; register before reading."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[receipt_id].add(future)
        try:
            yield future
        finally:
            waiting = self._waiting.get(receipt_id)
            if waiting is not None:
                waiting.discard(future)
                if not waiting:
                    del self._waiting[receipt_id]

    def notify(self, receipt_id: str) -> None:
        """Thread-safe: wake everything waiting on ``receipt_id``."""
        loop = self._loop
        if loop is None or receipt_id not in self._waiting:
            return
        loop.call_soon_threadsafe(self._wake, receipt_id)

    def _wake(self, receipt_id: str) -> None:
        for future in self._waiting.get(receipt_id, ()):
            if not future.done():
                future.set_result(None)


class PostgresListener:
    """LISTENs for settled receipts on the event loop and relays them to :class:`Waiters`.

    On the loop, not on a thread of its own: a thread woken at every settled receipt would take turns
    at the GIL with the loop serving requests, which costs more than relaying the notification.
    """

    def __init__(self, conninfo: str, waiters: Waiters) -> None:
        self.conninfo = conninfo
        self.waiters = waiters
        self._task: asyncio.Task[None] | None = None

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
                async with await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    delay = 0.5
                    async for note in conn.notifies():
                        self.waiters.notify(note.payload.split(":", 1)[0])
            except psycopg.Error as exc:
                log.warning("receipt listener lost its connection (%s); reconnecting in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
