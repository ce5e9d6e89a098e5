"""Long-poll support: wake requests waiting on a receipt as soon as it settles, without polling storms.

In-process transitions (the embedded mode, or this gateway's own cancel) notify directly. On
PostgreSQL a trigger NOTIFYs ``toolrelay_receipts`` in the transaction that settles a receipt; one
listener thread per gateway process relays those to the waiting requests. A slow periodic re-read
covers the gap while the listener reconnects.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
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
    """A daemon thread that LISTENs for settled receipts and relays them to :class:`Waiters`."""

    def __init__(self, conninfo: str, waiters: Waiters) -> None:
        self.conninfo = conninfo
        self.waiters = waiters
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="receipt-listener", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    delay = 0.5
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=1.0):
                            self.waiters.notify(note.payload.split(":", 1)[0])
            except psycopg.Error as exc:
                log.warning("receipt listener lost its connection (%s); reconnecting in %.1f s", exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
