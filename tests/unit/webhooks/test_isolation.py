"""Endpoints are isolated from each other: fair claims, a per-endpoint cap, and the breaker.

On the real store (the claim and record statements) and, for the cap, with a dispatcher against a
real hanging receiver and a real healthy one. Times are the database's: a cool-down that is over is
made by moving ``paused_until`` back in SQL.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from receipts.db import Database
from receipts.webhooks import endpoints, queue
from receipts.webhooks.records import PENDING, Breaker, Claimed, Endpoint, Settled
from tests.support import sql
from tests.support.receiver import Receiver, Reply
from tests.unit.webhooks.conftest import Bench

BREAKER = Breaker(failures=3, cooldown_s=60.0, max_s=600.0)
INSERT = """
INSERT INTO webhook_messages (id, tenant_id, endpoint_id, url, event_type, receipt_id, payload, status, attempts,
                              next_attempt_at, created_at, updated_at)
SELECT 'msg_' || %(prefix)s || g, %(tenant)s, %(endpoint)s, %(url)s, 'receipt.succeeded', 'rcpt_' || %(prefix)s || g,
       jsonb_build_object('type', 'receipt.succeeded', 'timestamp', '2026-12-01T00:00:00Z',
                          'data', jsonb_build_object('id', 'rcpt_' || %(prefix)s || g)),
       'pending', 0, now() - make_interval(secs => %(age_s)s) - (%(count)s - g) * interval '1 millisecond',
       now(), now()
FROM generate_series(1, %(count)s) AS g"""


def queue_messages(bench: Bench, endpoint: Endpoint | str, count: int, *, age_s: float = 0.0) -> None:
    """``count`` due messages for ``endpoint`` (or a call's own webhook_url), the last due ``age_s`` seconds
    ago (database time), each one a millisecond after the one before."""
    endpoint_id, url = (endpoint.id, None) if isinstance(endpoint, Endpoint) else (None, endpoint)
    sql.execute(bench.db, INSERT, prefix=f"{(endpoint_id or url or '')[-6:]}{int(age_s)}x", tenant=bench.tenant_id,
                endpoint=endpoint_id, url=url, count=count, age_s=age_s)


def endpoint(bench: Bench, name: str) -> Endpoint:
    created, _ = bench.run(bench.endpoints.create_endpoint(bench.tenant_id, f"http://127.0.0.1:9/{name}"))
    return created


def lanes(claimed: list[Claimed]) -> Counter[str]:
    return Counter(m.lane for m in claimed)


def claim(bench: Bench, limit: int = 50, *, cap: int = 4, held: dict[str, int] | None = None) -> list[Claimed]:
    return bench.run(queue.claim(limit, lease_s=30, lane_cap=cap, held=held))


def failed(message: Claimed, *, health: str = "failing") -> Settled:
    return Settled(message_id=message.id, endpoint_id=message.endpoint_id, lease=message.lease,
                   sent_at=time.monotonic(), success=False, status_code=500, latency_ms=1.0, response="down",
                   error=None, status=PENDING, attempts=message.attempts + 1, retry_in_s=0.0, health=health,
                   trial=message.trial)


def delivered(message: Claimed) -> Settled:
    return Settled(message_id=message.id, endpoint_id=message.endpoint_id, lease=message.lease,
                   sent_at=time.monotonic(), success=True, status_code=200, latency_ms=1.0, response="ok", error=None,
                   status="delivered", attempts=message.attempts + 1, retry_in_s=None, health="ok", trial=message.trial)


def record(bench: Bench, results: list[Settled]) -> None:
    bench.run(queue.record(results, disable_after_s=3600, breaker=BREAKER))


def paused_for(bench: Bench, endpoint_id: str) -> float | None:
    """Seconds until the endpoint's pause ends (database time), None when it is not paused."""
    left = sql.value(bench.db, "SELECT extract(epoch FROM paused_until - now()) FROM webhook_endpoints "
                               "WHERE id = %(id)s", id=endpoint_id)
    return None if left is None else float(left)


def cool_down_over(bench: Bench, endpoint_id: str) -> None:
    sql.execute(bench.db, "UPDATE webhook_endpoints SET paused_until = now() - interval '1 second' WHERE id = %(id)s",
                id=endpoint_id)


def get(bench: Bench, endpoint_id: str) -> dict[str, Any]:
    return bench.run(endpoints.get_endpoint(bench.tenant_id, endpoint_id)).to_api()


# -- fair claims ---------------------------------------------------------------------------------


def test_a_claim_takes_at_most_the_cap_of_each_endpoint_and_shares_the_batch(bench: Bench) -> None:
    busy, quiet = endpoint(bench, "busy"), endpoint(bench, "quiet")
    queue_messages(bench, busy, 40, age_s=60)  # older: a claim by due time alone would take only these
    queue_messages(bench, quiet, 6)
    first = claim(bench, 50, cap=4)
    assert lanes(first) == {busy.id: 4, quiet.id: 4}
    # What a run already holds counts against the cap.
    assert claim(bench, 50, cap=4, held={busy.id: 4, quiet.id: 4}) == []
    again = claim(bench, 50, cap=4, held={busy.id: 4, quiet.id: 3})
    assert lanes(again) == {quiet.id: 1}


def test_the_batch_goes_round_robin_between_endpoints(bench: Bench) -> None:
    a, b, c = endpoint(bench, "a"), endpoint(bench, "b"), endpoint(bench, "c")
    for age, ep in ((30, a), (20, b), (10, c)):
        queue_messages(bench, ep, 10, age_s=age)
    assert lanes(claim(bench, 6, cap=10)) == {a.id: 2, b.id: 2, c.id: 2}


def test_a_backlog_of_an_endpoint_at_its_cap_does_not_hide_the_others(bench: Bench) -> None:
    flooded, other = endpoint(bench, "flooded"), endpoint(bench, "other")
    queue_messages(bench, flooded, 600, age_s=60)  # more than a claim scans
    queue_messages(bench, other, 3)
    claimed = claim(bench, 10, cap=4, held={flooded.id: 4})
    assert lanes(claimed) == {other.id: 3}


def test_a_calls_own_webhook_url_is_a_lane_of_its_own(bench: Bench) -> None:
    ep = endpoint(bench, "registered")
    queue_messages(bench, "http://127.0.0.1:9/own-a", 10, age_s=60)
    queue_messages(bench, "http://127.0.0.1:9/own-b", 10, age_s=30)
    queue_messages(bench, ep, 10)
    claimed = claim(bench, 50, cap=3)
    assert lanes(claimed) == {"http://127.0.0.1:9/own-a": 3, "http://127.0.0.1:9/own-b": 3, ep.id: 3}
    assert lanes(claim(bench, 50, cap=3, held={"http://127.0.0.1:9/own-a": 3, "http://127.0.0.1:9/own-b": 1})) == {
        "http://127.0.0.1:9/own-b": 2, ep.id: 3}


def test_without_a_cap_one_endpoint_may_take_the_whole_batch(bench: Bench) -> None:
    alone = endpoint(bench, "alone")
    queue_messages(bench, alone, 30)
    assert lanes(bench.run(queue.claim(20, lease_s=30))) == {alone.id: 20}


# -- the breaker -----------------------------------------------------------------------------------


def test_failures_in_a_row_pause_the_endpoint_and_its_messages_wait(bench: Bench) -> None:
    ep = endpoint(bench, "down")
    queue_messages(bench, ep, 6)
    claimed = claim(bench, 2, cap=10)
    record(bench, [failed(m) for m in claimed])
    assert paused_for(bench, ep.id) is None and get(bench, ep.id)["consecutive_failures"] == 2
    third = claim(bench, 1, cap=10)
    record(bench, [failed(m) for m in third])  # the third in a row: open

    shown = get(bench, ep.id)
    assert shown["consecutive_failures"] == 3 and shown["paused_until"] is not None
    left = paused_for(bench, ep.id)
    assert left is not None and 55 < left <= 60
    sql.execute(bench.db, "UPDATE webhook_messages SET locked_until = NULL, next_attempt_at = now()")
    assert claim(bench, 50, cap=10) == []  # nothing is sent while it is paused ...
    statuses = sql.rows(bench.db, "SELECT status, count(*) FROM webhook_messages GROUP BY status")
    assert statuses == [("pending", 6)]  # ... and nothing is failed either


def test_after_the_cool_down_one_trial_goes_and_its_failure_pauses_twice_as_long(bench: Bench) -> None:
    ep = endpoint(bench, "down")
    queue_messages(bench, ep, 10)
    record(bench, [failed(m) for m in claim(bench, 3, cap=10)])
    sql.execute(bench.db, "UPDATE webhook_messages SET locked_until = NULL")
    cool_down_over(bench, ep.id)

    [trial] = claim(bench, 50, cap=10)
    assert trial.trial
    assert claim(bench, 50, cap=10) == []  # one trial at a time, whoever claims
    record(bench, [failed(trial)])
    left = paused_for(bench, ep.id)
    assert left is not None and 115 < left <= 120  # 2 x 60 s

    cool_down_over(bench, ep.id)
    [second_trial] = claim(bench, 50, cap=10)
    record(bench, [failed(second_trial)])
    left = paused_for(bench, ep.id)
    assert left is not None and 235 < left <= 240  # 4 x 60 s


def test_a_successful_trial_closes_the_breaker(bench: Bench) -> None:
    ep = endpoint(bench, "back")
    queue_messages(bench, ep, 10)
    record(bench, [failed(m) for m in claim(bench, 3, cap=10)])
    sql.execute(bench.db, "UPDATE webhook_messages SET locked_until = NULL")
    cool_down_over(bench, ep.id)
    [trial] = claim(bench, 50, cap=10)
    record(bench, [delivered(trial)])

    shown = get(bench, ep.id)
    assert (shown["paused_until"], shown["consecutive_failures"], shown["failing_since"]) == (None, 0, None)
    assert len(claim(bench, 50, cap=10)) == 9  # everything else goes again
    # The next opening starts from the base cool-down again.
    sql.execute(bench.db, "UPDATE webhook_messages SET locked_until = NULL")
    record(bench, [failed(m) for m in claim(bench, 3, cap=10)])
    left = paused_for(bench, ep.id)
    assert left is not None and 55 < left <= 60


def test_failures_of_messages_sent_before_the_pause_do_not_lengthen_it(bench: Bench) -> None:
    ep = endpoint(bench, "down")
    queue_messages(bench, ep, 8)
    claimed = claim(bench, 8, cap=10)  # all in flight when the breaker opens
    record(bench, [failed(m) for m in claimed[:3]])
    before = paused_for(bench, ep.id)
    record(bench, [failed(m) for m in claimed[3:]])
    after = paused_for(bench, ep.id)
    assert before is not None and after is not None and after <= before
    assert get(bench, ep.id)["consecutive_failures"] == 8


def test_enabling_an_endpoint_again_closes_its_breaker(bench: Bench) -> None:
    ep = endpoint(bench, "down")
    queue_messages(bench, ep, 3)
    record(bench, [failed(m) for m in claim(bench, 3, cap=10)])
    bench.run(endpoints.update_endpoint(bench.tenant_id, ep.id, enabled=False))
    shown = bench.run(endpoints.update_endpoint(bench.tenant_id, ep.id, enabled=True)).to_api()
    assert (shown["paused_until"], shown["consecutive_failures"]) == (None, 0)


# -- the cap, with a dispatcher and real receivers ----------------------------------------------------


@pytest.mark.timeout(120)
def test_a_hanging_endpoint_holds_only_its_share_of_the_dispatcher(bench: Bench, db: Database) -> None:
    timeout_s = 5.0
    bench.configure(webhook_concurrency=8, webhook_endpoint_concurrency=2, webhook_timeout_s=timeout_s,
                    webhook_breaker_failures=0)
    with Receiver() as hanging, Receiver() as healthy:
        hanging.default = Reply(200, delay_s=60)
        stuck = bench.endpoint(hanging, event_types=["receipt.succeeded"])
        fine = bench.endpoint(healthy, event_types=["receipt.succeeded"])
        queue_messages(bench, stuck, 40, age_s=60)  # all due before the healthy endpoint's
        queue_messages(bench, fine, 40)
        run = threading.Thread(target=bench.dispatcher().run, kwargs={"max_s": 1.0}, daemon=True)
        run.start()
        arrived = healthy.wait_for(40, timeout=60)
        hung = list(hanging.requests)
        # Every healthy message arrived while the first requests to the hanging endpoint were still
        # hanging, and those were no more than its cap.
        assert len(hung) == 2, len(hung)
        assert max(r.at for r in arrived) < min(r.at for r in hung) + timeout_s
        assert all(r.verified_by == (0,) for r in arrived)
        hanging.stop()  # let the hanging requests end so the run can
        run.join(60)
