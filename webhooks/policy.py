"""The retry policy: what happens to a message after an attempt.

* 2xx is success; anything else is a failure (a 3xx included: redirects are not followed).
* 410 Gone fails the message and disables the endpoint.
* Otherwise the next attempt follows the schedule (``TOOLRELAY_WEBHOOK_RETRY_SCHEDULE``; by default
  Svix's: immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h), each delay with +-20 % jitter so a
  receiver coming back is not hit by every message at once. Entry ``i`` is the delay before attempt
  ``i + 1``; the first entry is the first attempt, which the outbox makes due at once.
* A ``Retry-After`` header (seconds or an HTTP date) delays the next attempt to at least that time.
* When the schedule is exhausted the message is ``failed``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from receipts.webhooks.records import DELIVERED, FAILED, PENDING, Claimed, Settled

JITTER = 0.2
MAX_RETRY_AFTER_S = 24 * 3600.0  # a receiver cannot park a message for longer than a day


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one HTTP attempt gave: a status code (and headers we care about), or an error."""

    started: float  # time.monotonic() when the attempt began
    status_code: int | None = None
    latency_ms: float | None = None
    response: str | None = None
    error: str | None = None
    retry_after_s: float | None = None
    sent: bool = True  # False when the request was never made (refused before sending)
    blames_receiver: bool = True  # False when toolrelay, not the receiver, is at fault

    @property
    def success(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """``Retry-After`` in seconds from ``now`` (delta-seconds or HTTP-date), or None if absent or invalid."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


class RetryPolicy:
    """Decides a message's next state from the attempt it just had."""

    def __init__(self, schedule_s: Sequence[float], *, jitter: float = JITTER,
                 rng: random.Random | None = None) -> None:
        if not schedule_s:
            raise ValueError("the webhook retry schedule needs at least one entry")
        self.schedule_s = list(schedule_s)
        self.jitter = jitter
        self.rng = rng or random.Random()

    @property
    def max_attempts(self) -> int:
        return len(self.schedule_s)

    def delay_after(self, attempts: int, retry_after_s: float | None = None) -> float | None:
        """Seconds until the next attempt once ``attempts`` were made; None when none is left."""
        if attempts >= self.max_attempts:
            return None
        delay = self.schedule_s[attempts] * self.rng.uniform(1 - self.jitter, 1 + self.jitter)
        if retry_after_s is not None:
            delay = max(delay, min(retry_after_s, MAX_RETRY_AFTER_S))
        return delay

    def settle(self, message: Claimed, outcome: Outcome) -> Settled:
        """The attempt's log line and the message's next state, ready to be recorded."""
        attempts = message.attempts + 1
        health: str | None = None
        retry_in_s: float | None = None
        if outcome.success:
            status, health = DELIVERED, "ok"
        elif outcome.status_code == 410:
            status, health = FAILED, "gone"
        elif not outcome.sent and message.refusal is not None:
            status = FAILED  # nowhere to send it: retrying cannot help
        else:
            health = "failing" if outcome.blames_receiver else None
            delay = self.delay_after(attempts, outcome.retry_after_s)
            if delay is None:
                status = FAILED
            else:
                status, retry_in_s = PENDING, delay
        return Settled(
            message_id=message.id,
            endpoint_id=message.endpoint_id,
            lease=message.lease,
            sent_at=outcome.started,
            success=outcome.success,
            status_code=outcome.status_code,
            latency_ms=outcome.latency_ms,
            response=outcome.response,
            error=outcome.error,
            status=status,
            attempts=attempts,
            retry_in_s=retry_in_s,
            health=health,
            trial=message.trial,
        )
