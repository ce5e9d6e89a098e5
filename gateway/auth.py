"""Bearer API keys: who a request comes from (a :class:`~receipts.records.Caller`), and its rate limit.

Lookups are cached for ``TOOLRELAY_AUTH_CACHE_S`` (5 s by default) so a request costs no database
round trip: that is how long a revoked key may still work on a gateway process that looked it up
just before. An expiring key is never trusted past its expiry: the cache keeps it at most until then
(the time left comes from the database's clock with the lookup).

:func:`authenticate` is the one way in, for the API's routes (``gateway.deps``) and for anything
else served by the app (the MCP server: ``gateway.deps.caller_of(request)``): it answers the key's
:class:`~receipts.records.Caller` or raises a :class:`~gateway.problems.Problem` (401 for a
missing, unknown, revoked or expired key, 429 over the key's rate limit). What the caller's scopes
allow is then each surface's to apply: ``caller.may_use(tool)``, ``caller.visible(specs)``,
``caller.read_only``.
"""

from __future__ import annotations

import time

from starlette.requests import HTTPConnection

from gateway.problems import Problem
from gateway.ratelimit import Buckets, retry_after
from receipts import tenants
from receipts.db import Database
from receipts.records import Caller
from receipts.tenants import KeyCheck

UNAUTHORIZED = {"WWW-Authenticate": 'Bearer realm="toolrelay"'}
REFUSALS = {
    "unknown": "invalid API key",
    "revoked": "this API key was revoked",
    "expired": "this API key has expired",
}
MAX_CACHED = 10_000


class KeyCache:
    """Key -> what it is worth, remembered for ``ttl_s`` (and never past the key's expiry)."""

    def __init__(self, db: Database, ttl_s: float) -> None:
        self.db = db
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[KeyCheck, float]] = {}

    async def lookup(self, key: str) -> KeyCheck:
        hit = self._cache.get(key)
        now = time.monotonic()
        if hit is not None and hit[1] > now:
            return hit[0]
        found = await self.db.arun(tenants.check(key))
        if len(self._cache) > MAX_CACHED:
            self._cache.clear()
        ttl = self.ttl_s if found.valid_for_s is None else min(self.ttl_s, found.valid_for_s)
        self._cache[key] = (found, now + ttl)
        return found


def bearer_key(request: HTTPConnection) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Problem(401, "missing API key: send 'Authorization: Bearer <key>'", headers=UNAUTHORIZED)
    return key.strip()


async def authenticate(keys: KeyCache, buckets: Buckets | None, request: HTTPConnection) -> Caller:
    """The caller of ``request``, once its key is valid and within its rate limit.

    Raises:
        Problem: 401 (no key, or an unknown, revoked or expired one), 429 with ``Retry-After`` (over the
            key's rate limit: nothing of the request is done).
    """
    found = await keys.lookup(bearer_key(request))
    if found.caller is None:
        raise Problem(401, REFUSALS.get(found.refused or "unknown", REFUSALS["unknown"]), headers=UNAUTHORIZED)
    if buckets is not None:
        wait_s = await buckets.take(found.caller.key_id)
        if wait_s > 0:
            raise Problem(429, f"rate limit of this API key exceeded; retry in {wait_s:.1f} s",
                          headers={"Retry-After": retry_after(wait_s)})
    return found.caller
