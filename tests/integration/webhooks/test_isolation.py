"""Webhook endpoints are isolated from each other, on a real deployment (DESIGN.md, Webhooks).

A hanging receiver holds only its endpoint's share of the dispatcher, so a healthy endpoint of the
same tenant gets every message promptly; an endpoint that keeps failing is paused by its breaker
(its messages wait, they are not failed), tried again once at growing intervals, and closed again
by the first success.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from tests.integration.webhooks.helpers import Hooks
from tests.support.receiver import Receiver, Reply
from tests.support.stack import Stack, running_stack

TIMEOUT_S = 20.0
CAP = 8  # TOOLRELAY_WEBHOOK_ENDPOINT_CONCURRENCY's default with 32 in flight per dispatcher
COOLDOWN_S = 2.0
SETTINGS = {"outbound_allow_cidrs": "127.0.0.0/8", "webhook_retry_schedule": "0,1,1,1,1,1,1,1",
            "webhook_timeout_s": TIMEOUT_S, "webhook_poll_s": 0.5, "webhook_breaker_failures": 3,
            "webhook_breaker_cooldown_s": COOLDOWN_S, "webhook_breaker_max_s": 8}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Tools and webhooks on workers of their own (2 processes each), so what is measured is the dispatcher.
    with running_stack(tmp_path_factory.mktemp("stack"), workers=0, **SETTINGS) as running:
        running.start_worker("-Q", "tools")
        running.start_worker("-Q", "webhooks")
        yield running


def at(attempt: dict[str, Any]) -> float:
    return datetime.fromisoformat(attempt["at"].replace("Z", "+00:00")).timestamp()


def test_a_hanging_endpoint_does_not_hold_back_another_endpoints_deliveries(stack: Stack) -> None:
    hooks = Hooks(stack)
    with Receiver() as hanging, Receiver() as healthy:
        hanging.default = Reply(200, delay_s=60)  # past the delivery timeout: every request hangs
        hooks.endpoint(hanging, event_types=["receipt.succeeded"])
        hooks.endpoint(healthy, event_types=["receipt.succeeded"])
        receipts = [hooks.call(arguments={"n": n})["id"] for n in range(64)]

        arrived = healthy.wait_for(64, timeout=120)
        hung = list(hanging.requests)
        assert {r.payload["data"]["id"] for r in arrived} == set(receipts)
        assert all(r.verified_by == (0,) for r in arrived)
        # All 64 arrived while the first requests to the hanging endpoint still hung (none could have
        # been answered or timed out yet) ...
        assert hung, "the hanging endpoint got no request at all"
        assert max(r.at for r in arrived) < min(r.at for r in hung) + TIMEOUT_S, stack.logs()
        # ... and those held no more than the endpoint's share of each dispatcher run (the webhooks
        # worker runs two at a time).
        assert len(hung) <= 2 * CAP, len(hung)
        hanging.stop()


def test_an_endpoint_that_keeps_failing_is_paused_then_closed_by_a_successful_trial(stack: Stack) -> None:
    hooks = Hooks(stack)
    with Receiver() as receiver:
        receiver.default = Reply(500, "down")
        endpoint = hooks.endpoint(receiver, event_types=["receipt.succeeded"])
        receipts = [hooks.call(arguments={"n": n})["id"] for n in range(4)]
        path = f"/v1/webhook-endpoints/{endpoint['id']}"

        hooks.wait_log(endpoint["id"], lambda _: hooks.get(path)["paused_until"] is not None)
        shown = hooks.get(path)
        assert shown["consecutive_failures"] >= 3 and shown["enabled"], shown
        # Three trials later (each after a longer cool-down), the messages still wait: none failed, though
        # without the breaker their 8 attempts 1 s apart (+-20 %) would have been used up by then.
        receiver.wait_for(len(receiver.requests) + 3, timeout=60)
        waiting = hooks.deliveries(endpoint["id"])
        assert [d["status"] for d in waiting] == ["pending"] * 4, waiting
        so_far = sorted(at(a) for d in waiting for a in d["attempts"])
        assert so_far[-1] - so_far[0] > 7 * 1.2, so_far
        assert sum(d["attempt_count"] for d in waiting) < 4 * 8

        receiver.default = Reply(200)
        final = hooks.wait_log(endpoint["id"], lambda ds: len(ds) == 4 and all(d["status"] == "delivered"
                                                                               for d in ds), timeout=60)
        closed = hooks.get(path)
        assert (closed["paused_until"], closed["consecutive_failures"], closed["failing_since"]) == (None, 0, None)
        assert {d["receipt_id"] for d in final} == set(receipts)

    # The attempts by the database's clock: after the breaker opened, one at a time, each after a
    # cool-down at least as long as the one before it, until the trial that succeeded.
    attempts = sorted((a for d in final for a in d["attempts"]), key=at)
    first_success = next(i for i, a in enumerate(attempts) if a["success"])
    opening = max(i for i, a in enumerate(attempts[:first_success]) if at(a) - at(attempts[0]) < 1.0)
    trials = attempts[opening + 1:first_success + 1]
    assert len(trials) >= 4, attempts  # three failed trials, then the one that succeeded
    gaps = [at(b) - at(a) for a, b in zip([attempts[opening], *trials], trials, strict=False)]
    assert all(gap >= COOLDOWN_S - 0.2 for gap in gaps), gaps
    assert all(later >= earlier - 0.5 for earlier, later in zip(gaps, gaps[1:], strict=False)), gaps
