"""Retry delays: 1 s, doubling, capped at 100 s, never sooner than the tool asked."""

from __future__ import annotations

import pytest

from workers.backoff import Backoff


def test_defaults_are_one_second_doubling_capped_at_one_hundred() -> None:
    backoff = Backoff(jitter=0)
    assert [backoff.delay(attempt) for attempt in range(1, 10)] == [1, 2, 4, 8, 16, 32, 64, 100, 100]


@pytest.mark.parametrize("attempt", [1, 2, 3, 5, 8, 20])
def test_jitter_only_ever_shortens_by_at_most_a_tenth(attempt: int) -> None:
    exact = Backoff(jitter=0).delay(attempt)
    delays = [Backoff().delay(attempt) for _ in range(200)]
    assert all(0.9 * exact <= d <= exact for d in delays)
    assert len(set(delays)) > 1


def test_retry_after_is_honoured_when_longer_than_the_backoff() -> None:
    backoff = Backoff()
    assert backoff.delay(1, retry_after_ms=5000) == 5.0
    assert backoff.delay(8, retry_after_ms=250_000) == 250.0


def test_retry_after_shorter_than_the_backoff_does_not_shorten_it() -> None:
    assert Backoff(jitter=0).delay(4, retry_after_ms=10) == 8


def test_settings_shape_the_schedule() -> None:
    backoff = Backoff(initial=0.2, factor=3, maximum=1.0, jitter=0)
    assert [backoff.delay(a) for a in (1, 2, 3)] == [pytest.approx(0.2), pytest.approx(0.6), 1.0]
