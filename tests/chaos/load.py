"""The steady load: calls to ``chaos_write`` at a fixed rate, each submitted until it is accepted.

A client that does what a careful one does: every call has an ``Idempotency-Key``; a ``503`` is
retried after its ``Retry-After`` (capped), and so is a request that got no answer, with the same
key, so a call whose commit's answer was lost comes back as a replay (``200``, ``Idempotent-Replayed``)
instead of running twice. Every call carries a deadline (``timeout_s``). Some calls are then
long-polled (``GET /v1/receipts/{id}?wait_s=``) until they end, which exercises reads and the
gateway's listener through the faults.

Every answer is counted: what a 503 must look like (``application/problem+json`` with
``Retry-After``) is checked; a 5xx other than 503, an answer nobody expects and a request with no
answer at all are recorded with a sample.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.chaos.tools import TOOL

REQUEST_TIMEOUT_S = 30.0  # a gateway answers within its database pool's wait (10 s); no answer by then is a hang
SUBMIT_BUDGET_S = 60.0  # how long one call is retried before the client gives up on it
MAX_RETRY_WAIT_S = 2.0
KEEPALIVE_S = 3.0  # below the gateway's keep-alive timeout (see Load.__aenter__)
TERMINAL = {"success", "failed", "partially_succeeded", "canceled"}
Answer = tuple[int, "Mapping[str, str]", dict[str, Any]]  # status, headers (any case), JSON body


@dataclass(frozen=True)
class Accepted:
    """A call the gateway accepted: its key, receipt, and how (``202``, or ``200`` replaying it)."""

    key: str
    receipt_id: str
    status: int
    after_503: bool  # an earlier try of it got a 503 (the commit's answer lost) or no answer


@dataclass
class Answers:
    """Every answer the client got from the gateway."""

    by_status: Counter[int] = field(default_factory=Counter)
    server_errors: int = 0  # 5xx other than 503
    bad_503: int = 0  # a 503 without problem+json or without Retry-After
    unexpected: int = 0  # any other answer a call or a read should never get
    no_answer: int = 0  # the request timed out or its connection failed
    samples: list[str] = field(default_factory=list)

    def sample(self, text: str) -> None:
        if len(self.samples) < 12:
            self.samples.append(text[:400])


class Load:
    """Submits ``rate`` calls a second until :meth:`stop`; what was accepted, and every answer."""

    def __init__(self, base_url: str, api_key: str, *, rate: float, deadlines_s: tuple[float, ...],
                 work_s: tuple[float, float], poll_share: float, seed: int, prefix: str = "chaos",
                 max_inflight: int = 400) -> None:
        self.base_url = base_url
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.rate = rate
        self.deadlines_s = deadlines_s
        self.work_s = work_s
        self.poll_share = poll_share
        self.rng = random.Random(seed)
        self.prefix = prefix
        self.max_inflight = max_inflight
        self.answers = Answers()
        self.accepted: dict[str, Accepted] = {}
        self.sent = 0
        self.gave_up = 0  # calls never accepted within SUBMIT_BUDGET_S
        self.skipped = 0  # ticks dropped because max_inflight calls were still in flight
        self.replays_after_503 = 0
        self.failures: list[str] = []  # calls the client itself failed on (a bug of the script's, not toolrelay's)
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Load:
        self._session = aiohttp.ClientSession(
            # Idle connections are dropped before the gateway's keep-alive timeout (uvicorn's, 5 s)
            # ends them: aiohttp keeps them 15 s by default, and a request sent on a connection the
            # server is closing at that moment gets no answer (HTTP/1.1's keep-alive race).
            connector=aiohttp.TCPConnector(limit=128, keepalive_timeout=KEEPALIVE_S),
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S))
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use Load as an async context manager"
        return self._session

    async def run(self, duration_s: float) -> None:
        """Open-loop: start a call every ``1/rate`` s for ``duration_s``, then wait for the calls in flight."""
        interval = 1.0 / self.rate
        began = time.monotonic()
        n = 0
        while not self._stopping.is_set():
            due = began + n * interval
            if due - began >= duration_s:
                break
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            n += 1
            if len(self._tasks) >= self.max_inflight:
                self.skipped += 1
                continue
            self.spawn(self.call(f"{self.prefix}-{n}"))
        await self.drain()

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.failures.append(repr(task.exception())[:300])

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def stop(self) -> None:
        self._stopping.set()

    def body(self, key: str) -> dict[str, Any]:
        low, high = self.work_s
        return {"tool": TOOL, "arguments": {"key": key, "work_s": round(self.rng.uniform(low, high), 3)},
                "timeout_s": self.rng.choice(self.deadlines_s)}

    async def call(self, key: str, *, poll: bool | None = None) -> Accepted | None:
        """Submit one call until accepted (or the budget is spent); then maybe long-poll it to its end."""
        self.sent += 1
        body = self.body(key)
        give_up = time.monotonic() + SUBMIT_BUDGET_S
        troubled = False
        while time.monotonic() < give_up:
            answer = await self.request("POST", "/v1/tool-calls", json=body, headers={"Idempotency-Key": key})
            if answer is None or answer[0] >= 500:
                troubled = True
                await asyncio.sleep(self._retry_wait(answer))
                continue
            status, headers, document = answer
            if status == 202 or (status == 200 and headers.get("Idempotent-Replayed") == "true"):
                accepted = Accepted(key, str(document["id"]), status, troubled)
                self.accepted[key] = accepted
                if status == 200:
                    self.replays_after_503 += troubled
                if poll if poll is not None else self.rng.random() < self.poll_share:
                    await self.follow(accepted.receipt_id, float(body["timeout_s"]))
                return accepted
            return None  # an unexpected answer (counted): a call the client cannot place
        self.gave_up += 1
        return None

    async def follow(self, receipt_id: str, deadline_s: float) -> None:
        """Long-poll the receipt until it is terminal, or well past its deadline."""
        until = time.monotonic() + deadline_s + 30
        while time.monotonic() < until:
            answer = await self.request("GET", f"/v1/receipts/{receipt_id}", params={"wait_s": "5"})
            if answer is None or answer[0] >= 500:
                await asyncio.sleep(self._retry_wait(answer))
                continue
            status, _, document = answer
            if status != 200 or document.get("status") in TERMINAL:
                return

    @staticmethod
    def _retry_wait(answer: Answer | None) -> float:
        if answer is None:
            return 0.5
        try:
            return min(max(float(answer[1].get("Retry-After", "1")), 0.1), MAX_RETRY_WAIT_S)
        except ValueError:
            return 1.0

    async def request(self, method: str, path: str, *, expect: tuple[int, ...] = (200, 202),
                      **kwargs: Any) -> Answer | None:
        """One request, its answer counted and checked (``expect``: the statuses that are right); None when it
        got no answer."""
        headers = {**self.headers, **kwargs.pop("headers", {})}
        try:
            async with self.session.request(method, f"{self.base_url}{path}", headers=headers, **kwargs) as response:
                text = await response.text()
                status, answer_headers = response.status, response.headers.copy()  # names in any case
        except (aiohttp.ClientError, OSError) as exc:  # TimeoutError is an OSError
            self.answers.no_answer += 1
            self.answers.sample(f"{method} {path}: no answer: {type(exc).__name__}: {exc}")
            return None
        self.answers.by_status[status] += 1
        document = _json(text)
        self._check(method, path, status, answer_headers, document, text, expect)
        return status, answer_headers, document

    def _check(self, method: str, path: str, status: int, headers: Mapping[str, str], document: dict[str, Any],
               text: str, expect: tuple[int, ...]) -> None:
        if status == 503:
            if not headers.get("Content-Type", "").startswith("application/problem+json") \
                    or "Retry-After" not in headers:
                self.answers.bad_503 += 1
                self.answers.sample(f"{method} {path}: 503 without problem+json or Retry-After: {headers} {text}")
        elif status >= 500:
            self.answers.server_errors += 1
            self.answers.sample(f"{method} {path}: {status}: {text}")
        elif status not in expect:
            self.answers.unexpected += 1
            self.answers.sample(f"{method} {path}: {status}: {text}")
        elif not document.get("id"):
            self.answers.unexpected += 1
            self.answers.sample(f"{method} {path}: {status} without a receipt: {text}")


def _json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
