"""The retry policy: schedule with jitter, Retry-After, 410, 3xx, refusals, exhaustion."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from receipts.webhooks.records import DELIVERED, FAILED, PENDING, Claimed
from webhooks.policy import Outcome, RetryPolicy, parse_retry_after

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
STARTED = 1234.5  # time.monotonic() when the attempt began
SVIX = [0, 5, 300, 1800, 7200, 18000, 36000, 36000]


def message(attempts: int = 0, refusal: str | None = None) -> Claimed:
    return Claimed(id="msg_1", tenant_id="ten_1", endpoint_id="ep_1", url="http://example.com/hook",
                   event_type="receipt.succeeded", receipt_id="rcpt_1", payload={}, attempts=attempts,
                   lease=NOW + timedelta(minutes=2), secrets=("token",), refusal=refusal)


def test_every_delay_of_the_schedule_gets_at_most_20_percent_jitter() -> None:
    policy = RetryPolicy(SVIX, rng=random.Random(7))
    for attempts, base in enumerate(SVIX[1:], start=1):
        delays = [policy.delay_after(attempts) for _ in range(300)]
        assert all(d is not None and base * 0.8 <= d <= base * 1.2 for d in delays)
        if base:
            assert max(d for d in delays if d is not None) - min(d for d in delays if d is not None) > base * 0.2


def test_the_schedule_ends_after_as_many_attempts_as_entries() -> None:
    policy = RetryPolicy(SVIX)
    assert policy.max_attempts == 8
    assert policy.delay_after(7) is not None and policy.delay_after(8) is None
    settled = policy.settle(message(attempts=7), Outcome(started=STARTED, status_code=500))
    assert settled.status == FAILED and settled.attempts == 8 and settled.retry_in_s is None


def test_a_failure_schedules_the_next_attempt() -> None:
    settled = RetryPolicy([0, 10], jitter=0).settle(message(), Outcome(started=STARTED, status_code=500))
    assert settled.status == PENDING and settled.retry_in_s == 10 and settled.sent_at == STARTED
    assert settled.health == "failing" and not settled.success


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_2xx_is_success(status: int) -> None:
    settled = RetryPolicy(SVIX).settle(message(), Outcome(started=STARTED, status_code=status))
    assert settled.status == DELIVERED and settled.success and settled.health == "ok"


@pytest.mark.parametrize("status", [301, 302, 307, 308, 400, 404, 429, 500, 503])
def test_anything_else_is_a_failure(status: int) -> None:
    settled = RetryPolicy(SVIX).settle(message(), Outcome(started=STARTED, status_code=status))
    assert settled.status == PENDING and not settled.success


def test_410_fails_the_message_and_marks_the_endpoint_gone() -> None:
    settled = RetryPolicy(SVIX).settle(message(), Outcome(started=STARTED, status_code=410))
    assert settled.status == FAILED and settled.health == "gone"


def test_retry_after_delays_but_never_hastens_the_next_attempt() -> None:
    policy = RetryPolicy([0, 10, 10], jitter=0)
    assert policy.delay_after(1, retry_after_s=60) == 60
    assert policy.delay_after(1, retry_after_s=2) == 10
    assert policy.delay_after(1, retry_after_s=10**9) == 24 * 3600


def test_retry_after_parsing() -> None:
    assert parse_retry_after("120", NOW) == 120
    assert parse_retry_after(format_datetime(NOW + timedelta(seconds=90), usegmt=True), NOW) == 90
    assert parse_retry_after(format_datetime(NOW - timedelta(seconds=90), usegmt=True), NOW) == 0
    assert parse_retry_after("soon", NOW) is None
    assert parse_retry_after(None, NOW) is None
    assert parse_retry_after("-5", NOW) is None


def test_a_message_that_cannot_be_sent_fails_at_once_without_blaming_the_endpoint() -> None:
    refused = message(refusal="not sent: the endpoint is disabled")
    settled = RetryPolicy(SVIX).settle(refused, Outcome(started=STARTED, error=refused.refusal, sent=False,
                                                        blames_receiver=False))
    assert settled.status == FAILED and settled.health is None and settled.error == refused.refusal


def test_an_internal_error_is_retried_without_blaming_the_endpoint() -> None:
    outcome = Outcome(started=STARTED, error="not sent: secret unreadable", sent=False, blames_receiver=False)
    settled = RetryPolicy(SVIX).settle(message(), outcome)
    assert settled.status == PENDING and settled.health is None


def test_an_empty_schedule_is_refused() -> None:
    with pytest.raises(ValueError):
        RetryPolicy([])
