"""The dispatcher: claim due messages in batches, send them concurrently, record the attempts in bulk.

One run is a pipeline on one asyncio event loop::

    claim a batch (one UPDATE ... RETURNING, leased)  ->  per endpoint at most ``endpoint_concurrency``,
          ^ refill when half of the last claim is done     in all up to ``concurrency`` POSTs at a time
          +------------- record finished attempts in bulk (one INSERT + one UPDATE executemany) <-+

Database calls run in a thread (``asyncio.to_thread``) so requests keep flowing while they do. A
run ends when nothing is due any more or after ``max_s`` (then the task asks for another run, so a
worker that also serves tools is not held by webhooks forever). Past ``max_s`` it goes on claiming
only while requests it sent before then are still in flight (it is running anyway), so a run that
waits for a hanging endpoint's last requests keeps every other endpoint's messages moving.

Each delivery attempt is a span in the trace of the receipt its message reports (the message keeps the
receipt's ``traceparent``), and the POST carries that trace context, so a receiver that traces sees
its webhook as part of the call it is about.

Endpoints are isolated: at most ``endpoint_concurrency`` deliveries of one run go to one endpoint
(or one call's ``webhook_url``) at a time, and the claim takes at most twice that of one endpoint,
sharing each batch between endpoints (:mod:`webhooks.lanes`, :mod:`receipts.webhooks.queue`); so a
hanging endpoint holds at most its own share of the run's ``concurrency``, and every other
endpoint's deliveries keep their pace. An endpoint that keeps failing is paused by its breaker.

Why the lease is what it is: a claimed message may wait behind a round of its endpoint's requests,
then behind ``batch / concurrency`` rounds of requests that each take up to the timeout; the lease
covers that, plus a margin, so a live dispatcher never loses a message it holds, and a dead one's
messages come back soon after.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from receipts import jsoncodec
from receipts.db import Database
from receipts.outbound.guard import OutboundGuard
from receipts.telemetry import tracing
from receipts.webhooks import queue
from receipts.webhooks.records import DELIVERED, FAILED, Breaker, Claimed, Settled
from webhooks.lanes import Lanes
from webhooks.metrics import DeliveryMetrics
from webhooks.policy import Outcome, RetryPolicy
from webhooks.signing import Signer
from webhooks.transport import Transport

log = logging.getLogger(__name__)
tracer = trace.get_tracer("toolrelay.webhooks")

LEASE_MARGIN_S = 5.0
FLUSH_S = 0.1  # record finished attempts at least this often, or as soon as half a batch has finished
IDLE_CLAIM_S = 0.25  # with requests still in flight, look for new work at least this often


def lease_for(timeout_s: float, batch: int, concurrency: int) -> float:
    """Seconds a claimed message stays leased: every round of requests ahead of it (its endpoint's, then
    the run's), its own, plus a margin."""
    batch = max(batch, 1)
    concurrency = max(min(concurrency, batch), 1)
    return timeout_s * (math.ceil(batch / concurrency) + 2) + LEASE_MARGIN_S


@dataclass(frozen=True, slots=True)
class RunReport:
    """What one run did; ``more`` says it stopped on time with work still due."""

    delivered: int = 0
    failed: int = 0
    retrying: int = 0
    more: bool = False

    @property
    def attempts(self) -> int:
        return self.delivered + self.failed + self.retrying


class Dispatcher:
    """Delivers due webhook messages. Every dependency is passed in; nothing is global."""

    def __init__(self, db: Database, signer: Signer, policy: RetryPolicy, guard: OutboundGuard, *,
                 timeout_s: float, batch: int, concurrency: int, disable_after_s: float,
                 metrics: DeliveryMetrics | None = None, endpoint_concurrency: int | None = None,
                 breaker: Breaker | None = None) -> None:
        self.db = db
        self.metrics = metrics
        self.disable_after_s = disable_after_s
        self.signer = signer
        self.policy = policy
        self.guard = guard
        self.timeout_s = timeout_s
        self.batch = max(batch, 1)
        self.concurrency = max(min(concurrency, self.batch), 1)
        self.endpoint_concurrency = max(min(endpoint_concurrency or self.concurrency, self.concurrency), 1)
        self.breaker = breaker or Breaker()
        self.flush_size = max(self.batch // 2, self.concurrency)
        self._lanes_limit = self._lanes().claim_limit

    @property
    def lease_s(self) -> float:
        return lease_for(self.timeout_s, self.batch, self.concurrency)

    def run(self, *, max_s: float = 10.0) -> RunReport:
        """Deliver until nothing is due or ``max_s`` has passed (synchronous entry point for a task)."""
        lanes = self._lanes()
        first = self._claim(self.batch, lanes.held())
        if not first:
            return RunReport()  # nothing due: no event loop, no HTTP session
        return asyncio.run(self.run_async(max_s=max_s, claimed=first, lanes=lanes))

    def _lanes(self) -> Lanes:
        return Lanes(self.endpoint_concurrency, uncapped=self.endpoint_concurrency >= self.concurrency,
                     batch=self.batch)

    async def run_async(self, *, max_s: float = 10.0, claimed: list[Claimed] | None = None,
                        lanes: Lanes | None = None) -> RunReport:
        """Deliver until nothing is due or ``max_s`` has passed, starting with ``claimed`` if given (claimed
        with ``lanes``'s counts)."""
        deadline = time.monotonic() + max_s
        totals = {DELIVERED: 0, FAILED: 0, "pending": 0}
        gate = asyncio.Semaphore(self.concurrency)
        lanes = lanes or self._lanes()
        inflight: set[asyncio.Task[Settled]] = set()
        tail: set[asyncio.Task[Settled]] | None = None  # what was in flight when max_s was up
        finished: list[Settled] = []
        drained = False  # the last claim found less than it asked for, and no lane was full
        last_claimed = answered = 0  # how many the last claim took, and how many have been answered since
        next_claim = 0.0
        last_flush = time.monotonic()

        def start(messages: list[Claimed]) -> None:
            nonlocal drained, last_claimed, answered, next_claim
            room = self.batch - len(inflight)
            lanes.add(messages)
            inflight.update(asyncio.create_task(self._deliver(transport, gate, lanes, m)) for m in messages)
            drained = len(messages) < room and not lanes.full()
            last_claimed, answered, next_claim = len(messages), 0, time.monotonic() + IDLE_CLAIM_S

        async with Transport(self.guard, timeout_s=self.timeout_s, connections=self.concurrency) as transport:
            if claimed:
                start(claimed)
            while True:
                now = time.monotonic()
                if now >= deadline and tail is None:
                    tail = set(inflight)
                claiming = now < deadline or bool(tail and not tail.isdisjoint(inflight))
                # Claim again when half of the last claim is answered, or at least every IDLE_CLAIM_S
                # (what is held may be a hanging endpoint's, which answers only at its timeout).
                due = not inflight or now >= next_claim or (not drained and answered >= max(1, last_claimed // 2))
                if claiming and due and len(inflight) < self.batch:
                    start(await asyncio.to_thread(self._claim, self.batch - len(inflight), lanes.held()))
                if not inflight:
                    break
                done, inflight = await asyncio.wait(inflight, timeout=FLUSH_S, return_when=asyncio.FIRST_COMPLETED)
                answered += len(done)
                finished.extend(task.result() for task in done)
                if finished and (not inflight or len(finished) >= self.flush_size
                                 or time.monotonic() - last_flush >= FLUSH_S):
                    await self._record(finished, totals)
                    finished = []
                    last_flush = time.monotonic()
            if finished:
                await self._record(finished, totals)
        report = RunReport(totals[DELIVERED], totals[FAILED], totals["pending"],
                           more=not drained and time.monotonic() >= deadline)
        if report.attempts:
            log.info("webhooks: %d delivered, %d failed for good, %d to retry", report.delivered, report.failed,
                     report.retrying)
        return report

    def _claim(self, limit: int, held: dict[str, int]) -> list[Claimed]:
        """Claim up to ``limit`` messages, none of a lane beyond what it may hold (``held`` it has already).

        Runs on a thread: ``held`` is a copy, and the counts are updated on the loop with what it returns.
        """
        return self.db.run(queue.claim(limit, lease_s=self.lease_s, lane_cap=self._lanes_limit, held=held))

    async def _record(self, results: list[Settled], totals: dict[str, int]) -> None:
        await asyncio.to_thread(self.db.run, queue.record(list(results), disable_after_s=self.disable_after_s,
                                                          breaker=self.breaker))
        for result in results:
            totals[result.status] += 1
            if self.metrics is not None:
                self.metrics.attempted(result.status, result.latency_ms)

    async def _deliver(self, transport: Transport, gate: asyncio.Semaphore, lanes: Lanes,
                       message: Claimed) -> Settled:
        """One attempt for one message; never raises (a lost result would hold the message until its lease ends)."""
        try:
            if message.refusal is not None:
                return self.policy.settle(message, Outcome(started=time.monotonic(), error=message.refusal, sent=False,
                                                           blames_receiver=False))
            body = jsoncodec.compact(message.payload)
            # The endpoint's gate first: a message waiting for its endpoint takes none of the run's slots.
            async with lanes.gate(message.lane), gate:
                with tracer.start_as_current_span(f"webhook {message.event_type}", kind=SpanKind.PRODUCER,
                                                  context=tracing.context_of(message.traceparent),
                                                  attributes={"toolrelay.webhook.message_id": message.id,
                                                              "toolrelay.receipt_id": message.receipt_id,
                                                              "toolrelay.webhook.attempt": message.attempts + 1}):
                    # Signed only now: a message may have waited for a free slot, and the timestamp must be fresh.
                    headers = self.signer.headers(message.id, message.receipt_id, body.decode(), message.secrets)
                    tracing.inject(headers)
                    outcome = await transport.post(message.url, body, headers)
            return self.policy.settle(message, outcome)
        except Exception as exc:  # noqa: BLE001 - e.g. an unreadable secret: log the attempt, retry later
            log.warning("webhooks: message %s not sent: %s", message.id, type(exc).__name__)
            outcome = Outcome(started=time.monotonic(), error=f"not sent: {type(exc).__name__}: {exc}"[:1000],
                              sent=False, blames_receiver=False)
            return self.policy.settle(message, outcome)
        finally:
            lanes.release(message.lane)  # the lane may take another message in the next claim
