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

from receipts.db import Announce
from receipts.messages import DELIVER_TASK, WEBHOOKS_QUEUE, TaskSender

log = logging.getLogger(__name__)

DELIVER_EXPIRES_S = 60.0  # a deliver task queued behind a backlog this long is redundant: drop it


def publish_deliver(sender: TaskSender) -> None:
    """Ask a dispatcher on the ``webhooks`` queue to deliver what is due."""
    sender.send_task(DELIVER_TASK, queue=WEBHOOKS_QUEUE, expires=DELIVER_EXPIRES_S)


class Nudger:
    """A database listener (``Database.subscribe``) that publishes coalesced deliver tasks.

    Each committed transition announces how many webhook messages it queued, so a transition that
    queued none (a tenant without endpoints, an event nobody subscribed to) nudges nobody, and an
    endpoint registered a moment ago is nudged for at once.
    """

    def __init__(self, sender: TaskSender, *, interval_s: float = 0.1) -> None:
        self.sender = sender
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._last = 0.0
        self._timer: threading.Timer | None = None

    def __call__(self, announced: Announce) -> None:
        if announced.messages:
            self.nudge()

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
