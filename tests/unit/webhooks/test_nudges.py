"""Nudges: a deliver task after transitions that wrote outbox rows, coalesced, none without endpoints."""

from __future__ import annotations

import time
from typing import Any

from receipts.messages import DELIVER_TASK, WEBHOOKS_QUEUE
from receipts.webhooks.nudges import Nudger
from tests.support.factories import RecordingSender
from tests.unit.webhooks.conftest import Bench


def test_a_tenant_without_endpoints_is_never_nudged_for(bench: Bench) -> None:
    sender = RecordingSender()
    bench.db.subscribe(Nudger(sender))
    bench.call()
    assert sender.sent == []


class TimedSender(RecordingSender):
    """A RecordingSender that also notes when (monotonic) each message was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def send_task(self, name: str, args: Any = None, **options: Any) -> None:
        self.times.append(time.monotonic())
        super().send_task(name, args, **options)


def test_transitions_with_messages_nudge_the_webhooks_queue_coalesced(bench: Bench) -> None:
    bench.run(bench.endpoints.create_endpoint(bench.tenant_id, "http://127.0.0.1:9/hook"))
    sender = TimedSender()
    interval_s = 2.0  # far longer than the burst takes, however loaded the machine
    bench.db.subscribe(Nudger(sender, interval_s=interval_s))
    started = time.monotonic()
    for _ in range(5):
        bench.call()  # ten transitions that announce an event
    burst_s = time.monotonic() - started
    assert len(sender.sent) == 1, burst_s  # the first at once, the rest wait for the interval
    deadline = time.monotonic() + 30
    while len(sender.sent) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(sender.sent) == 2  # one trailing nudge for the whole burst
    assert sender.times[1] - sender.times[0] >= interval_s * 0.9  # at the end of the interval, not sooner
    assert all(s.name == DELIVER_TASK and s.options["queue"] == WEBHOOKS_QUEUE for s in sender.sent)


def test_a_calls_own_webhook_url_nudges_without_endpoints(bench: Bench) -> None:
    sender = RecordingSender()
    bench.db.subscribe(Nudger(sender))
    bench.call(webhook_url="http://127.0.0.1:9/hook")
    assert len(sender.sent) == 1
