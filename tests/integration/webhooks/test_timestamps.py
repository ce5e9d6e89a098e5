"""Webhook times are the database's: the payload's ``timestamp`` and each attempt's ``at`` are within
seconds of PostgreSQL's now() when they happened, far from the two minutes the clock of the worker
that makes the transition and sends the webhook is off (tests/support/clocks.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.webhooks.helpers import Hooks
from tests.support.clocks import database_now, skewed, unix, worker_clock_offset
from tests.support.receiver import Receiver
from tests.support.stack import running_stack

SETTINGS: dict[str, Any] = {"outbound_allow_cidrs": "127.0.0.0/8", "webhook_timeout_s": 2, "webhook_poll_s": 0.5}


@pytest.mark.parametrize("skew", [pytest.param(-120, id="2-minutes-slow"), pytest.param(120, id="2-minutes-fast")])
def test_payload_timestamps_and_attempt_times_are_the_databases(tmp_path: Path, skew: int) -> None:
    with running_stack(tmp_path, workers=0, **SETTINGS) as stack, Receiver() as receiver:
        stack.start_worker(prefix=skewed(skew))  # runs the tool, and the dispatcher on the webhooks queue
        offset = worker_clock_offset(stack)
        assert abs(offset - skew) < 10, offset
        hooks = Hooks(stack)
        endpoint = hooks.endpoint(receiver)
        # The receiver stamps each request with this process's monotonic clock; this maps it to the
        # database's (PostgreSQL runs on this machine, so the two clocks advance together), to within
        # the round trip that read the database's clock.
        before = time.monotonic()
        database_minus_monotonic = database_now(stack.db) - (before + time.monotonic()) / 2

        receipt = hooks.call(arguments={"n": skew})
        assert hooks.finished(receipt["id"])["status"] == "success"
        requests = [receiver.wait_for(1, type=kind, receipt_id=receipt["id"])[0]
                    for kind in ("receipt.running", "receipt.succeeded")]
        log = hooks.wait_log(endpoint["id"], lambda ds: len(ds) == 2 and all(d["status"] == "delivered" for d in ds))

        attempts = {d["id"]: d["attempts"] for d in log}
        for request in requests:
            arrived = request.at + database_minus_monotonic
            payload = request.payload
            assert request.verified_by == (0,)
            # The timestamp is the transition's now(): the receipt's updated_at, to the microsecond.
            assert payload["timestamp"] == payload["data"]["updated_at"], payload
            # Sent after the transition, and within seconds of it: a time from the worker's clock would
            # be two minutes out. The bounds leave a loaded machine its delays, not the skew.
            assert -1 < arrived - unix(payload["timestamp"]) < 15, (arrived, payload["timestamp"])
            [attempt] = attempts[request.webhook_id]
            assert abs(unix(attempt["at"]) - arrived) < 15, (arrived, attempt)
