"""Rate limits per API key: a token bucket, shared by every gateway through Redis.

Each key has a bucket of ``TOOLRELAY_RATE_LIMIT_BURST`` tokens that refills at
``TOOLRELAY_RATE_LIMIT_PER_S``; a request takes one token, or is refused with the time until the
next one (a ``429`` with ``Retry-After``, before anything is read or stored).

:class:`RedisBuckets` keeps the buckets in Redis, so every gateway process draws on the same ones:
one Lua script per request (one round trip, EVALSHA, atomic on the server), on the event loop with
redis-py's asyncio client, timed by Redis's own clock so gateways whose clocks differ agree. Should
Redis not answer, each process falls back to its own buckets for a few seconds (the limit then holds
per process instead of overall) rather than refusing or stalling every request.
:class:`MemoryBuckets` are the buckets of one process: the embedded mode's (in-memory broker, one
process), and the fallback.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Protocol

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from receipts.settings import Settings

log = logging.getLogger(__name__)

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
# After Redis failed to answer, how long each process limits on its own before it asks Redis again.
OUTAGE_S = 5.0
REDIS_TIMEOUT_S = 1.0
MAX_LOCAL_BUCKETS = 10_000

# KEYS[1]: the bucket; ARGV: rate (tokens/s), capacity. Returns {1, "0"} when a token was taken, else
# {0, seconds until one is there} (a string: Lua numbers reach the client as integers).
TAKE = """
local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1])
local at = tonumber(state[2])
if tokens == nil or at == nil then
  tokens = capacity
  at = now
end
tokens = math.min(capacity, tokens + math.max(0, now - at) * rate)
local taken = 0
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
  taken = 1
else
  wait = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil((capacity - tokens) / rate * 1000) + 1000)
return {taken, tostring(wait)}
"""


class Buckets(Protocol):
    """Where the buckets are kept."""

    async def take(self, key_id: str) -> float:
        """Take a token of ``key_id``'s bucket: 0 when taken, else the seconds until one is there."""
        ...

    async def aclose(self) -> None: ...


class MemoryBuckets:
    """The buckets of this process (monotonic clock)."""

    def __init__(self, rate: float, capacity: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.capacity = capacity
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key id -> (tokens, when)

    async def take(self, key_id: str) -> float:
        return self.take_now(key_id)

    def take_now(self, key_id: str) -> float:
        now = self.clock()
        tokens, at = self._buckets.get(key_id, (float(self.capacity), now))
        tokens = min(float(self.capacity), tokens + max(0.0, now - at) * self.rate)
        if len(self._buckets) >= MAX_LOCAL_BUCKETS and key_id not in self._buckets:
            self._forget_full(now)
        if tokens >= 1:
            self._buckets[key_id] = (tokens - 1, now)
            return 0.0
        self._buckets[key_id] = (tokens, now)
        return (1 - tokens) / self.rate

    def _forget_full(self, now: float) -> None:
        """Drop the buckets that have refilled (they are the same as no bucket)."""
        for key_id, (tokens, at) in list(self._buckets.items()):
            if tokens + (now - at) * self.rate >= self.capacity:
                del self._buckets[key_id]

    async def aclose(self) -> None:
        self._buckets.clear()


class RedisBuckets:
    """Buckets in Redis, shared by every gateway; this process's own while Redis does not answer."""

    def __init__(self, url: str, *, rate: float, capacity: int, key_prefix: str = "") -> None:
        self.url = url
        self.rate = rate
        self.capacity = capacity
        self.key_prefix = f"{key_prefix}toolrelay:ratelimit:"
        self.fallback = MemoryBuckets(rate, capacity)
        self._redis: aioredis.Redis | None = None
        self._script: AsyncScript | None = None
        self._local_until = 0.0

    async def take(self, key_id: str) -> float:
        if time.monotonic() < self._local_until:
            return self.fallback.take_now(key_id)
        try:
            if self._redis is None or self._script is None:
                self._redis = aioredis.Redis.from_url(self.url, socket_timeout=REDIS_TIMEOUT_S,
                                                      socket_connect_timeout=REDIS_TIMEOUT_S)
                self._script = self._redis.register_script(TAKE)
            taken, wait = await self._script(keys=[self.key_prefix + key_id], args=[repr(self.rate), self.capacity])
        except (RedisError, OSError) as exc:
            log.warning("rate limits: Redis did not answer (%s); limiting in this process for %.0f s", exc, OUTAGE_S)
            self._local_until = time.monotonic() + OUTAGE_S
            return self.fallback.take_now(key_id)
        return 0.0 if int(taken) else float(wait)

    async def aclose(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None


def build_buckets(settings: Settings) -> Buckets | None:
    """The buckets ``settings`` ask for: None when rate limits are off (``TOOLRELAY_RATE_LIMIT_PER_S`` 0)."""
    if settings.rate_limit_per_s <= 0:
        return None
    capacity = settings.rate_limit_capacity
    url = settings.rate_limit_redis_url or (settings.broker_url if settings.broker_url.startswith(REDIS_SCHEMES)
                                            else "")
    if not url:
        return MemoryBuckets(settings.rate_limit_per_s, capacity)
    return RedisBuckets(url, rate=settings.rate_limit_per_s, capacity=capacity, key_prefix=settings.broker_key_prefix)


def retry_after(wait_s: float) -> str:
    """The ``Retry-After`` header for a wait: whole seconds, at least one."""
    return str(max(1, math.ceil(wait_s)))
