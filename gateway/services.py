"""Everything a request handler needs, built once per app from settings (no module-level state)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

from gateway.auth import KeyCache
from gateway.metrics import GatewayMetrics
from gateway.waiters import Waiters
from receipts.catalogue import Catalogue
from receipts.messages import TaskSender, publish_execute
from receipts.nudges import Nudger
from receipts.outbound import OutboundGuard
from receipts.records import Receipt, ToolSpec
from receipts.settings import Settings
from receipts.store import ReceiptStore
from receipts.tenants import Tenants
from receipts.webhook_store import WebhookStore


@dataclass(frozen=True)
class CheckedTool:
    """A catalogue entry with its compiled argument validator."""

    spec: ToolSpec
    validator: Draft202012Validator

    def errors(self, arguments: Any) -> list[dict[str, str]]:
        """Every schema violation as ``{field, message}``, fields prefixed with ``arguments``."""
        found = []
        for err in sorted(self.validator.iter_errors(arguments), key=lambda e: list(e.absolute_path)):
            path = ".".join(["arguments", *map(str, err.absolute_path)])
            found.append({"field": path, "message": err.message})
        return found


class ToolCache:
    """Catalogue lookups with compiled validators, kept for a few seconds."""

    def __init__(self, catalogue: Catalogue, ttl_s: float) -> None:
        self.catalogue = catalogue
        self.ttl_s = ttl_s
        self._cache: dict[tuple[str, str], tuple[CheckedTool, float]] = {}

    def cached(self, tenant_id: str, name: str) -> CheckedTool | None:
        """The entry if it is cached and fresh, without touching the database."""
        hit = self._cache.get((tenant_id, name))
        return hit[0] if hit is not None and hit[1] > time.monotonic() else None

    def get(self, tenant_id: str, name: str) -> CheckedTool:
        key = (tenant_id, name)
        hit = self._cache.get(key)
        now = time.monotonic()
        if hit is not None and hit[1] > now:
            return hit[0]
        spec = self.catalogue.find(tenant_id, name)
        checked = CheckedTool(spec, Draft202012Validator(spec.parameters))
        self._cache[key] = (checked, now + self.ttl_s)
        return checked

    def forget(self, tenant_id: str, name: str) -> None:
        self._cache.pop((tenant_id, name), None)


class Services:
    """The gateway's dependencies: store, catalogue, keys, publisher and long-poll waiters."""

    def __init__(self, settings: Settings, store: ReceiptStore, sender: TaskSender,
                 publish: Callable[[Receipt], None] | None = None) -> None:
        db = store.db
        self.settings = settings
        self.db = db
        self.sender = sender
        # How an accepted receipt's execute message goes out: batched off the request path in
        # production (gateway/publisher.py), inline when a sender is handed in (embedded mode, tests).
        self.publish = publish or (lambda receipt: publish_execute(sender, receipt, grace_s=settings.lease_grace_s))
        self.store = store
        self.catalogue = Catalogue(db)
        self.tenants = Tenants(db)
        self.keys = KeyCache(self.tenants, settings.auth_cache_s)
        self.tools = ToolCache(self.catalogue, settings.catalogue_cache_s)
        self.waiters = Waiters()
        self.metrics = GatewayMetrics(db)
        self.store.subscribe(lambda receipt, _messages: self.waiters.notify(receipt.id))
        # Webhooks: endpoints and secrets, the SSRF guard for their URLs, and a nudge to the dispatcher after
        # transitions made here (cancel, a client's result), so their messages go out at once.
        self.webhooks = WebhookStore(db, settings.secret_key)
        self.outbound_guard = OutboundGuard(settings.outbound_allow_cidrs)
        self.store.subscribe(Nudger(sender))

    def broker_ping(self) -> None:
        """Open (and close) a broker connection; raises when the broker is unreachable."""
        connect = getattr(self.sender, "connection_for_write", None)
        if connect is None:
            return
        with connect() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
