"""The benchmark's HTTP client, on aiohttp (httpx's own pool tops out near 550 req/s here and would
measure httpx), with keep-alive connections and a fixed number of requests in flight.

* :meth:`Client.whole_path` is what a user's client does: ``POST /v1/tool-calls``, then
  ``GET /v1/receipts/{id}?wait_s=30`` again and again until the receipt is terminal. Every time is
  the client's own (``time.time()`` when it sent the POST, when it read the terminal answer).
* :meth:`Client.post_wait` is the other way a user can wait: one ``POST`` with ``wait_s``.
* :func:`hammer` sends a fixed list of requests (reads or submits) and times each, nothing else.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

TERMINAL = frozenset({"success", "failed", "partially_succeeded", "canceled"})
LONG_POLL_S = 30


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def ms(values: Sequence[float]) -> dict[str, float]:
    """p50 and p99 of durations in seconds, as milliseconds."""
    return {"p50_ms": round(percentile(values, 50) * 1000, 2), "p99_ms": round(percentile(values, 99) * 1000, 2)}


def run_async(coro: Awaitable[Any]) -> Any:
    """Run ``coro`` to completion on uvloop (asyncio's own loop when uvloop is missing)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvicorn[standard] brings it
        return asyncio.run(coro)  # type: ignore[arg-type]
    return uvloop.run(coro)  # type: ignore[arg-type]


def session(base_url: str, concurrency: int, headers: dict[str, str] | None = None) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(base_url=base_url, headers=headers or {},
                                 connector=aiohttp.TCPConnector(limit=concurrency, force_close=False),
                                 timeout=aiohttp.ClientTimeout(total=120))


async def _in_flight(count: int, concurrency: int, one: Callable[[int], Awaitable[None]]) -> None:
    """Call ``one(index)`` for every index below ``count``, ``concurrency`` at a time."""
    indexes = iter(range(count))

    async def lane() -> None:
        for index in indexes:
            await one(index)

    await asyncio.gather(*(lane() for _ in range(concurrency)))


@dataclass(frozen=True)
class Call:
    """One call as the client saw it: wall-clock times, the POST's status, the receipt's last status."""

    sent: float
    accepted: float
    terminal: float
    http_status: int
    receipt_status: str | None
    gets: int
    receipt: dict[str, Any] | None


def summarize(calls: list[Call]) -> dict[str, Any]:
    """Rate from the first POST sent to the last terminal answer read, and the latencies."""
    done = [c for c in calls if c.receipt_status in TERMINAL]
    span = max(c.terminal for c in calls) - min(c.sent for c in calls) if calls else float("nan")
    return {
        "calls": len(calls),
        "calls_per_s": round(len(calls) / span, 1) if span > 0 else float("nan"),
        "submit_to_terminal": ms([c.terminal - c.sent for c in done]),
        "post_answer": ms([c.accepted - c.sent for c in calls]),
        "gets_per_call": round(sum(c.gets for c in calls) / max(len(calls), 1), 2),
        "rejected": sum(1 for c in calls if c.http_status not in (200, 202)),
        "not_success": sum(1 for c in calls if c.http_status in (200, 202) and c.receipt_status != "success"),
    }


class Client:
    """A toolrelay HTTP API (a gateway or ``toolrelay dev``) and the key to call it with."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self.base_url = base_url
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.sent = 0

    def _bodies(self, count: int, wait_s: float | None = None) -> list[dict[str, Any]]:
        start, self.sent = self.sent, self.sent + count
        return [{"tool": "echo", "arguments": {"i": start + n}, **({"wait_s": wait_s} if wait_s else {})}
                for n in range(count)]

    def whole_path(self, calls: int, concurrency: int) -> list[Call]:
        """``calls`` echo calls, ``concurrency`` in flight: POST each, then long-poll it to its end."""
        return run_async(self._whole_path(self._bodies(calls), concurrency))  # type: ignore[no-any-return]

    async def _whole_path(self, bodies: list[dict[str, Any]], concurrency: int) -> list[Call]:
        calls: list[Call] = []
        async with session(self.base_url, concurrency, self.headers) as http:

            async def one(index: int) -> None:
                sent = time.time()
                async with http.post("/v1/tool-calls", json=bodies[index]) as response:
                    receipt = await response.json(content_type=None)
                    status = response.status
                accepted = time.time()
                gets = 0
                while status in (200, 202) and receipt.get("status") not in TERMINAL:
                    async with http.get(f"/v1/receipts/{receipt['id']}", params={"wait_s": LONG_POLL_S}) as answer:
                        gets += 1
                        if answer.status != 200:
                            receipt = {"status": f"GET {answer.status}"}
                            break
                        receipt = await answer.json(content_type=None)
                calls.append(Call(sent, accepted, time.time(), status,
                                  receipt.get("status") if status in (200, 202) else None, gets, receipt))

            await _in_flight(len(bodies), concurrency, one)
        return calls

    def submit(self, calls: int, concurrency: int) -> list[str]:
        """``calls`` echo calls POSTed and not waited for; the ids of those accepted."""
        return run_async(self._submit(self._bodies(calls), concurrency))  # type: ignore[no-any-return]

    async def _submit(self, bodies: list[dict[str, Any]], concurrency: int) -> list[str]:
        ids: list[str] = []
        async with session(self.base_url, concurrency, self.headers) as http:

            async def one(index: int) -> None:
                async with http.post("/v1/tool-calls", json=bodies[index]) as response:
                    receipt = await response.json(content_type=None)
                    if response.status == 202:
                        ids.append(receipt["id"])

            await _in_flight(len(bodies), concurrency, one)
        return ids

    def post_wait(self, calls: int, wait_s: float = 10) -> dict[str, Any]:
        """``calls`` echo calls one after the other, each a single ``POST`` with ``wait_s``."""
        return run_async(self._post_wait(self._bodies(calls, wait_s)))  # type: ignore[no-any-return]

    async def _post_wait(self, bodies: list[dict[str, Any]]) -> dict[str, Any]:
        times, terminal = [], 0
        async with session(self.base_url, 1, self.headers) as http:
            for body in bodies:
                sent = time.time()
                async with http.post("/v1/tool-calls", json=body) as response:
                    receipt = await response.json(content_type=None)
                times.append(time.time() - sent)
                terminal += response.status == 200 and receipt.get("status") == "success"
        return {"calls": len(bodies), "round_trip": ms(times), "answered_success": terminal}


@dataclass(frozen=True)
class Request:
    """One request of a :func:`hammer` run: the API key it carries, and the status it should get."""

    method: str
    path: str
    key: str
    body: bytes | None = None
    expect: int = 200


def json_body(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def hammer(base_url: str, requests: list[Request], concurrency: int) -> dict[str, Any]:
    """Send ``requests`` with ``concurrency`` in flight; requests/s (first sent to last answered) and latency."""
    return run_async(_hammer(base_url, requests, concurrency))  # type: ignore[no-any-return]


async def _hammer(base_url: str, requests: list[Request], concurrency: int) -> dict[str, Any]:
    headers = {key: {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
               for key in {r.key for r in requests}}
    latencies: list[float] = []
    unexpected: dict[str, int] = {}
    sizes: set[int] = set()
    async with session(base_url, concurrency) as http:

        async def one(index: int) -> None:
            request = requests[index]
            sent = time.perf_counter()
            async with http.request(request.method, request.path, data=request.body,
                                    headers=headers[request.key]) as response:
                body = await response.read()
            latencies.append(time.perf_counter() - sent)
            if response.status != request.expect:
                unexpected[str(response.status)] = unexpected.get(str(response.status), 0) + 1
            elif len(sizes) < 20:
                sizes.add(len(body))

        started = time.perf_counter()
        await _in_flight(len(requests), concurrency, one)
        seconds = time.perf_counter() - started
    return {"requests": len(requests), "concurrency": concurrency, "requests_per_s": round(len(requests) / seconds, 1),
            "latency": ms(latencies), "unexpected": unexpected, "body_bytes": sorted(sizes)}
