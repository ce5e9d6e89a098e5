"""Rate limits per API key: the token bucket, in process and in Redis, and the 429 the gateway answers.

Two gateway processes sharing one limit through Redis are in tests/integration/access/test_rate_limits.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from gateway.ratelimit import MemoryBuckets, RedisBuckets, build_buckets, retry_after
from receipts import tenants
from receipts.db import Database
from receipts.settings import Settings
from tests.support import services
from tests.unit.gateway.conftest import Gateway, assert_problem, running_gateway


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_lets_the_burst_through_then_one_request_per_refill() -> None:
    clock = Clock()
    buckets = MemoryBuckets(rate=2.0, capacity=3, clock=clock)
    assert [buckets.take_now("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take_now("k") == pytest.approx(0.5)
    assert buckets.take_now("other") == 0.0  # a bucket per key
    clock.now += 0.25
    assert buckets.take_now("k") == pytest.approx(0.25)
    clock.now += 0.25
    assert buckets.take_now("k") == 0.0
    clock.now += 60  # refills to its capacity, no further
    assert [buckets.take_now("k") for _ in range(4)][-1] > 0


def test_retry_after_is_whole_seconds_and_at_least_one() -> None:
    assert (retry_after(0.01), retry_after(1.0), retry_after(1.2)) == ("1", "1", "2")


def test_rate_limits_are_off_by_default_and_shared_through_redis_when_the_broker_is_redis() -> None:
    assert build_buckets(Settings()) is None
    assert isinstance(build_buckets(Settings(rate_limit_per_s=5)), MemoryBuckets)  # the in-memory broker: dev
    shared = build_buckets(Settings(rate_limit_per_s=5, broker_url="redis://127.0.0.1:6379/0"))
    assert isinstance(shared, RedisBuckets) and shared.capacity == 5
    assert Settings(rate_limit_per_s=0.5).rate_limit_capacity == 1
    assert Settings(rate_limit_per_s=5, rate_limit_burst=20).rate_limit_capacity == 20


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    prefix = services.redis_prefix()
    yield prefix
    services.clear_redis_prefix(prefix)


def test_buckets_in_redis_are_one_bucket_for_every_process(redis_prefix: str) -> None:
    async def scenario() -> list[float]:
        first = RedisBuckets(services.REDIS_URL, rate=0.001, capacity=4, key_prefix=redis_prefix)
        second = RedisBuckets(services.REDIS_URL, rate=0.001, capacity=4, key_prefix=redis_prefix)
        try:
            waits = [await (first if i % 2 else second).take("key_a") for i in range(6)]
            waits.append(await first.take("key_b"))
            return waits
        finally:
            await first.aclose()
            await second.aclose()

    waits = asyncio.run(scenario())
    assert waits[:4] == [0.0] * 4
    assert all(wait > 900 for wait in waits[4:6])  # a token every 1000 s, shared by both
    assert waits[6] == 0.0


def test_without_redis_each_process_limits_on_its_own() -> None:
    async def scenario() -> list[float]:
        buckets = RedisBuckets("redis://127.0.0.1:1/0", rate=0.001, capacity=2)
        try:
            return [await buckets.take("key_a") for _ in range(3)]
        finally:
            await buckets.aclose()

    waits = asyncio.run(scenario())
    assert waits[:2] == [0.0, 0.0] and waits[2] > 900


@pytest.fixture
def limited(db: Database) -> Iterator[Gateway]:
    with running_gateway(db, rate_limit_per_s=0.001, rate_limit_burst=3) as running:
        yield running


def test_over_the_limit_a_request_is_a_429_with_retry_after_and_stores_nothing(limited: Gateway) -> None:
    for _ in range(3):
        assert limited.post_call({"tool": "echo", "arguments": {}}).status_code == 202
    refused = limited.post_call({"tool": "echo", "arguments": {}})
    body = assert_problem(refused, 429)
    assert int(refused.headers["retry-after"]) >= 900
    assert "rate limit" in body["detail"]
    assert limited.receipt_count() == 3
    assert len(limited.executes()) == 3
    assert_problem(limited.client.get("/v1/tools", headers=limited.headers()), 429)  # reads count too
    # Another key has a bucket of its own, even in the same tenant.
    same_tenant = limited.db.run(tenants.create_key("acme"))
    assert limited.client.get("/v1/tools", headers=limited.headers(same_tenant)).status_code == 200
    assert limited.client.get("/v1/tools", headers=limited.headers(limited.other_key)).status_code == 200


def test_a_refused_key_is_not_counted_against_anyone(limited: Gateway) -> None:
    for _ in range(5):
        assert_problem(limited.client.get("/v1/tools", headers=limited.headers("trk_unknown")), 401)
    assert limited.client.get("/v1/tools", headers=limited.headers()).status_code == 200


def test_without_limits_nothing_is_refused(gateway: Gateway) -> None:
    assert gateway.client.app.state.services.buckets is None  # type: ignore[attr-defined]
    for _ in range(20):
        assert gateway.client.get("/v1/tools", headers=gateway.headers()).status_code == 200
