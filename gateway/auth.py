"""Bearer API keys. Lookups are cached briefly so a call costs no extra database round trip."""

from __future__ import annotations

import time

from fastapi import Request

from gateway.problems import Problem
from receipts import tenants
from receipts.db import Database
from receipts.records import Tenant

UNAUTHORIZED = {"WWW-Authenticate": 'Bearer realm="toolrelay"'}


class KeyCache:
    """Key -> tenant, remembered for ``ttl_s`` (a revoked key stops working within that time)."""

    def __init__(self, db: Database, ttl_s: float) -> None:
        self.db = db
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[Tenant | None, float]] = {}

    async def lookup(self, key: str) -> Tenant | None:
        hit = self._cache.get(key)
        now = time.monotonic()
        if hit is not None and hit[1] > now:
            return hit[0]
        tenant = await self.db.arun(tenants.for_key(key))
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[key] = (tenant, now + self.ttl_s)
        return tenant


def bearer_key(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Problem(401, "missing API key: send 'Authorization: Bearer <key>'", headers=UNAUTHORIZED)
    return key.strip()
