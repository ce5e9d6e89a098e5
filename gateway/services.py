"""Everything a request handler needs, built once per app from settings (no module-level state)."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from agents.batches import render
from gateway.auth import KeyCache
from gateway.batching import Batcher
from gateway.metrics import GatewayMetrics
from gateway.ratelimit import Buckets, build_buckets
from gateway.waiters import Waiters
from receipts.catalogue import tools as catalogue
from receipts.db import Database
from receipts.errors import NotFound
from receipts.messages import Executable, TaskSender, publish_execute
from receipts.outbound.guard import OutboundGuard
from receipts.records import Receipt
from receipts.secretbox import SecretBox
from receipts.settings import Settings
from receipts.store import batches, calls
from receipts.store.batches import NewBatch, Opened
from receipts.store.calls import Accepted, NewCall
from receipts.submission import CheckedTool
from receipts.webhooks.endpoints import Endpoints
from receipts.webhooks.nudges import Nudger


class ToolCache:
    """Catalogue lookups with compiled validators, kept for a few seconds."""

    def __init__(self, db: Database, ttl_s: float) -> None:
        self.db = db
        self.ttl_s = ttl_s
        self._cache: dict[tuple[str, str], tuple[CheckedTool, float]] = {}

    async def get(self, tenant_id: str, name: str) -> CheckedTool:
        """The tool with its validator. Raises NotFound for an unknown tool."""
        key = (tenant_id, name)
        hit = self._cache.get(key)
        now = time.monotonic()
        if hit is not None and hit[1] > now:
            return hit[0]
        checked = CheckedTool.of(await self.db.arun(catalogue.find(tenant_id, name)))
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[key] = (checked, now + self.ttl_s)
        return checked

    def forget(self, tenant_id: str, name: str) -> None:
        self._cache.pop((tenant_id, name), None)


class Services:
    """The gateway's dependencies: database, catalogue cache, keys and their rate limits, publisher and
    long-poll waiters."""

    def __init__(self, settings: Settings, db: Database, sender: TaskSender,
                 publish: Callable[[Executable], None] | None = None,
                 metrics_registry: CollectorRegistry | None = None) -> None:
        self.settings = settings
        self.db = db
        self.sender = sender
        # How an accepted receipt's execute message goes out: batched off the request path in
        # production (gateway/publisher.py), inline when a sender is handed in (embedded mode, tests).
        self.publish = publish or (lambda receipt: publish_execute(sender, receipt, grace_s=settings.lease_grace_s))
        # Concurrent requests' reads of receipts, their pending calls and the batches they open go to
        # PostgreSQL a lot per statement (gateway/batching.py).
        self.read_receipt: Batcher[tuple[str, str], Receipt] = Batcher(self._read_many)
        self.accept_pending: Batcher[NewCall, Accepted] = Batcher(self._accept_many)
        self.open_batch: Batcher[NewBatch, Opened] = Batcher(self._open_many, max_size=16)
        self.keys = KeyCache(db, settings.auth_cache_s)
        self.buckets: Buckets | None = build_buckets(settings)  # None: no rate limits
        self.tools = ToolCache(db, settings.catalogue_cache_s)
        self.waiters = Waiters()
        self.metrics = GatewayMetrics(db, metrics_registry)
        self.outbound_guard = OutboundGuard(settings.outbound_allow_cidrs)
        self.endpoints = Endpoints(self.box)
        # Transitions made here (cancel, a client's result) nudge the dispatcher, so their webhook
        # messages go out at once.
        db.subscribe(Nudger(sender))

    async def _read_many(self, wanted: list[tuple[str, str]]) -> list[Receipt | BaseException]:
        found = await self.db.arun(calls.get_many(list(wanted)))
        return [receipt or NotFound(f"no receipt {receipt_id}")
                for receipt, (_, receipt_id) in zip(found, wanted, strict=True)]

    async def _accept_many(self, new_calls: list[NewCall]) -> list[Accepted | BaseException]:
        results = await self.db.arun(calls.create_many(new_calls))
        return [*results]

    async def _open_many(self, news: list[NewBatch]) -> list[Opened | BaseException]:
        results = await self.db.arun(batches.open_many(news, render))
        return [*results]

    def box(self) -> SecretBox:
        """The secret box (SecretKeyMissing, a 503, when TOOLRELAY_SECRET_KEY is not set)."""
        return SecretBox(self.settings.secret_key)

    def broker_ping(self) -> None:
        """Open (and close) a broker connection; raises when the broker is unreachable."""
        connect = getattr(self.sender, "connection_for_write", None)
        if connect is None:
            return
        with connect() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
