"""Waking the webhook dispatcher right after a transition wrote outbox rows.

The rows are the truth and a periodic pump (Celery beat, or the embedded mode's loop) delivers them
anyway; a nudge only cuts the latency from about a second to a few milliseconds. Nudges are
coalesced: at most one deliver task per ``interval_s`` per process, plus one at the end of a burst
(a trailing timer), so a busy worker publishes a few tasks a second, not one per receipt.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy import select

from receipts import states
from receipts.db import Database
from receipts.messages import DELIVER_TASK, WEBHOOKS_QUEUE, TaskSender
from receipts.records import Receipt
from receipts.tables import webhook_endpoints

log = logging.getLogger(__name__)

DELIVER_EXPIRES_S = 60.0  # a deliver task queued behind a backlog this long is redundant: drop it


def publish_deliver(sender: TaskSender) -> None:
    """Ask a dispatcher on the ``webhooks`` queue to deliver what is due."""
    sender.send_task(DELIVER_TASK, queue=WEBHOOKS_QUEUE, expires=DELIVER_EXPIRES_S)


class Nudger:
    """A store listener (``ReceiptStore.subscribe``) that publishes coalesced deliver tasks.

    With ``db``, a transition of a tenant without any enabled endpoint (and without a webhook_url of
    its own) nudges nobody: whether a tenant has endpoints is looked up at most every
    ``endpoints_ttl_s`` per process, so installations that use no webhooks pay nothing per call. An
    endpoint registered meanwhile is served by the periodic pump until the answer is refreshed.
    """

    def __init__(self, sender: TaskSender, *, db: Database | None = None, interval_s: float = 0.1,
                 endpoints_ttl_s: float = 2.0) -> None:
        self.sender = sender
        self.db = db
        self.interval_s = interval_s
        self.endpoints_ttl_s = endpoints_ttl_s
        self._lock = threading.Lock()
        self._last = 0.0
        self._timer: threading.Timer | None = None
        self._endpoints: dict[str, tuple[bool, float]] = {}

    def __call__(self, receipt: Receipt) -> None:
        if receipt.status not in states.EVENT_TYPES:
            return  # this transition announces nothing
        if receipt.webhook_url is None and not self._has_endpoints(receipt.tenant_id):
            return  # no outbox rows were written
        self.nudge()

    def _has_endpoints(self, tenant_id: str) -> bool:
        if self.db is None:
            return True
        now = time.monotonic()
        known = self._endpoints.get(tenant_id)
        if known is not None and known[1] > now:
            return known[0]
        e = webhook_endpoints.c
        try:
            with self.db.read() as conn:
                found = conn.execute(
                    select(e.id).where(e.tenant_id == tenant_id, e.enabled.is_(True)).limit(1)
                ).first() is not None
        except Exception as exc:  # noqa: BLE001 - when in doubt, nudge
            log.warning("could not look up webhook endpoints (%s)", exc)
            return True
        if len(self._endpoints) > 10_000:
            self._endpoints.clear()
        self._endpoints[tenant_id] = (found, now + self.endpoints_ttl_s)
        return found

    def nudge(self) -> None:
        """Publish now, or schedule one publish at the end of the current interval."""
        with self._lock:
            wait = self._last + self.interval_s - time.monotonic()
            if wait > 0:
                if self._timer is None:
                    self._timer = threading.Timer(wait, self._fire)
                    self._timer.daemon = True
                    self._timer.start()
                return
            self._last = time.monotonic()
        self._publish()

    def _fire(self) -> None:
        with self._lock:
            self._timer = None
            self._last = time.monotonic()
        self._publish()

    def _publish(self) -> None:
        try:
            publish_deliver(self.sender)
        except Exception as exc:  # noqa: BLE001 - the periodic pump delivers without this hint
            log.warning("could not nudge the webhook dispatcher (%s); the periodic pump will deliver", exc)
