"""Lanes: what one dispatcher run holds per endpoint, and the gate that caps its deliveries there.

A lane is an endpoint, or a call's own ``webhook_url`` (:attr:`Claimed.lane`). A run may hold up to
``claim_limit`` messages of one lane (claimed and not yet sent or answered) and send at most ``cap``
of them at a time: the rest wait at the lane's gate without taking one of the run's ``concurrency``
slots, so a lane whose endpoint hangs holds at most ``cap`` of them. Holding up to twice the cap
lets a busy, healthy endpoint be claimed in batches (a refill when half of a claim has been
answered) instead of one message per claim; holding no more keeps one endpoint's backlog from
filling the run's batch.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable

from receipts.webhooks.records import Claimed


class Lanes:
    """Per-lane counts and gates of one run, on its event loop (never touched from another thread)."""

    def __init__(self, cap: int, *, uncapped: bool = False, batch: int) -> None:
        self.cap = max(cap, 1)
        # A dispatcher whose endpoint cap is its whole concurrency caps no lane: it may hold a full batch.
        self.claim_limit = batch if uncapped else min(batch, 2 * self.cap)
        self._held: Counter[str] = Counter()
        self._gates: dict[str, asyncio.Semaphore] = {}

    def held(self) -> dict[str, int]:
        """A copy of how many messages each lane holds (for a claim, which runs on another thread)."""
        return dict(self._held)

    def add(self, messages: Iterable[Claimed]) -> None:
        self._held.update(message.lane for message in messages)

    def full(self) -> bool:
        """Whether some lane holds all it may: a claim that took less than it asked for may have left
        that lane's messages, not run out of due ones."""
        return any(count >= self.claim_limit for count in self._held.values())

    def gate(self, lane: str) -> asyncio.Semaphore:
        """The semaphore that lets ``cap`` of the lane's messages be sent at a time."""
        gate = self._gates.get(lane)
        if gate is None:
            gate = self._gates[lane] = asyncio.Semaphore(self.cap)
        return gate

    def release(self, lane: str) -> None:
        """One message of the lane is done with (its attempt ended)."""
        self._held[lane] -= 1
        if self._held[lane] <= 0:  # nothing of the lane waits at its gate or holds it
            del self._held[lane]
            self._gates.pop(lane, None)
