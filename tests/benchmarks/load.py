"""Load on toolrelay's HTTP API with aiohttp (httpx's own pool tops out near 550 req/s here and would
measure httpx), and the timing of receipts read straight from the database.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from sqlalchemy import bindparam, func, select

from receipts.db import Database
from receipts.states import ACTIVE
from receipts.tables import receipts


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


@dataclass
class Submission:
    """One POST as the client saw it: wall-clock send and answer times, status and receipt id."""

    sent: float
    answered: float
    status: int
    receipt_id: str | None
    body: dict[str, Any] | None = None


@dataclass
class Batch:
    submissions: list[Submission] = field(default_factory=list)

    @property
    def accepted(self) -> list[Submission]:
        return [s for s in self.submissions if s.receipt_id is not None]


def call_body(index: int, wait_s: float | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"tool": "echo", "arguments": {"i": index}}
    if wait_s:
        body["wait_s"] = wait_s
    return body


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Submission:
    sent = time.time()
    async with session.post(url, json=body) as response:
        payload = await response.json(content_type=None)
        answered = time.time()
    receipt_id = payload.get("id") if response.status in (200, 202) else None
    return Submission(sent, answered, response.status, receipt_id, payload)


def _session(base_url: str, api_key: str, concurrency: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        base_url=base_url,
        headers={"Authorization": f"Bearer {api_key}"},
        connector=aiohttp.TCPConnector(limit=concurrency, force_close=False),
        timeout=aiohttp.ClientTimeout(total=120),
    )


async def _submit_all(base_url: str, api_key: str, calls: int, concurrency: int, wait_s: float | None) -> Batch:
    batch = Batch()
    counter = iter(range(calls))
    async with _session(base_url, api_key, concurrency) as session:

        async def one_client() -> None:
            for index in counter:
                batch.submissions.append(await _post(session, "/v1/tool-calls", call_body(index, wait_s)))

        await asyncio.gather(*(one_client() for _ in range(concurrency)))
    return batch


def submit(base_url: str, api_key: str, calls: int, concurrency: int, wait_s: float | None = None) -> Batch:
    """POST ``calls`` echo calls, ``concurrency`` in flight at a time (1 = one after the other)."""
    return run_async(_submit_all(base_url, api_key, calls, concurrency, wait_s))


def run_async(coro: Any) -> Any:
    """Run ``coro`` to completion on uvloop (asyncio's own loop when uvloop is missing)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvicorn[standard] brings it
        return asyncio.run(coro)
    return uvloop.run(coro)


def wait_terminal(db: Database, expected: int, *, stall_s: float = 60, interval_s: float = 0.25) -> float:
    """Wait until the ``expected`` receipts in the database are all terminal; the wall time it happened.

    Every ``interval_s`` it counts the receipts still open (a count of terminal receipts would scan
    them all). Even so the count reads an index entry for every receipt version not yet vacuumed, a
    few milliseconds of PostgreSQL CPU after some rounds, taken from the system being measured: hence
    the quarter second. The figures come from the receipts' own timestamps, so polling less often only
    ends the wait a little later. Raises when no receipt settles for ``stall_s`` seconds.
    """
    total = select(func.count()).select_from(receipts)
    still_open = select(func.count()).select_from(receipts).where(receipts.c.status.in_(sorted(ACTIVE)))
    last_open, last_change = -1, time.monotonic()
    with db.engine.connect() as conn:
        stored = conn.execute(total).scalar_one()
        conn.rollback()
        if stored < expected:
            raise RuntimeError(f"only {stored} of {expected} receipts are stored")
        while True:
            open_now = conn.execute(still_open).scalar_one()
            conn.rollback()
            if open_now == 0:
                return time.time()
            if open_now != last_open:
                last_open, last_change = open_now, time.monotonic()
            elif time.monotonic() - last_change > stall_s:
                raise RuntimeError(f"{open_now} receipts still open; none settled for {stall_s:.0f} s")
            time.sleep(interval_s)


@dataclass(frozen=True)
class Settled:
    status: str
    created_at: float
    finished_at: float


def settled(db: Database, ids: list[str]) -> dict[str, Settled]:
    """Status, created_at and finished_at (epoch seconds) of the given receipts."""
    query = select(receipts.c.id, receipts.c.status, receipts.c.created_at, receipts.c.finished_at).where(
        receipts.c.id.in_(bindparam("ids", expanding=True)))
    found: dict[str, Settled] = {}
    with db.engine.connect() as conn:
        for start in range(0, len(ids), 1000):
            for row in conn.execute(query, {"ids": ids[start:start + 1000]}):
                finished = row.finished_at.timestamp() if row.finished_at else float("nan")
                found[row.id] = Settled(row.status, row.created_at.timestamp(), finished)
    return found


def ms(values: list[float]) -> dict[str, float]:
    """p50 and p99 of durations in seconds, as milliseconds."""
    return {"p50_ms": round(percentile(values, 50) * 1000, 2), "p99_ms": round(percentile(values, 99) * 1000, 2)}
