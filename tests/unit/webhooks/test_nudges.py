"""Nudges: a deliver task after transitions that wrote outbox rows, coalesced, none without endpoints."""

from __future__ import annotations

import time

from receipts.messages import DELIVER_TASK, WEBHOOKS_QUEUE
from receipts.webhooks.nudges import Nudger
from tests.support.factories import RecordingSender
from tests.unit.webhooks.conftest import Bench


def test_a_tenant_without_endpoints_is_never_nudged_for(bench: Bench) -> None:
    sender = RecordingSender()
    bench.db.subscribe(Nudger(sender))
    bench.call()
    assert sender.sent == []


def test_transitions_with_messages_nudge_the_webhooks_queue_coalesced(bench: Bench) -> None:
    bench.run(bench.endpoints.create_endpoint(bench.tenant_id, "http://127.0.0.1:9/hook"))
    sender = RecordingSender()
    bench.db.subscribe(Nudger(sender, interval_s=0.3))
    for _ in range(5):
        bench.call()  # ten transitions that announce an event
    assert len(sender.sent) == 1  # the first at once, the rest wait for the interval
    time.sleep(0.6)
    assert len(sender.sent) == 2  # one trailing nudge for the whole burst
    assert all(s.name == DELIVER_TASK and s.options["queue"] == WEBHOOKS_QUEUE for s in sender.sent)


def test_a_calls_own_webhook_url_nudges_without_endpoints(bench: Bench) -> None:
    sender = RecordingSender()
    bench.db.subscribe(Nudger(sender))
    bench.call(webhook_url="http://127.0.0.1:9/hook")
    assert len(sender.sent) == 1
