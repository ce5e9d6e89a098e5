"""Time is the database's: a worker or a sweeper whose clock is minutes wrong works as if it were right.

Leases, deadlines and sweeps are written and compared with PostgreSQL's now(), so a host's clock
cannot make a claim fail, a lease look expired, or a sweeper reclaim a live attempt (DESIGN.md, Time
is the database's). Each skewed process runs under faketime (tests/support/clocks.py), and each test
first checks that the process really sees its wrong time, so none can pass by accident.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from receipts import tenants
from receipts.catalogue import tools
from receipts.store import calls
from receipts.store.calls import NewCall
from tests.integration.pipeline.conftest import effects, wait_until
from tests.support import sql
from tests.support.clocks import beat_clock_offset, database_now, skewed, unix, worker_clock_offset
from tests.support.stack import Stack, running_stack

SKEWS = [pytest.param(-120, id="2-minutes-slow"), pytest.param(120, id="2-minutes-fast")]
TIME_FIELDS = ("created_at", "updated_at", "started_at", "finished_at")


def submit(stack: Stack, tool: str, arguments: dict[str, Any]) -> str:
    with stack.client() as client:
        response = client.post("/v1/tool-calls", json={"tool": tool, "arguments": arguments})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def events(stack: Stack, receipt_id: str) -> list[dict[str, Any]]:
    with stack.client() as client:
        return client.get(f"/v1/receipts/{receipt_id}/events").json()["data"]  # type: ignore[no-any-return]


def assert_ran_once(stack: Stack, receipt: dict[str, Any], output: Any, window: tuple[float, float]) -> None:
    """Succeeded on its first attempt, with every time of the receipt and its timeline in ``window``
    (database time): a time taken from the skewed clock would be two minutes outside it."""
    assert (receipt["status"], receipt["attempt"], receipt["error"]) == ("success", 1, None), stack.logs()
    assert receipt["output"] == output
    steps = events(stack, receipt["id"])
    assert [(e["from_status"], e["to_status"], e["attempt"]) for e in steps][-2:] == [("pending", "running", 1),
                                                                                      ("running", "success", 1)]
    assert not any(e["actor"] == "sweeper" for e in steps)
    times = [unix(receipt[name]) for name in TIME_FIELDS] + [unix(e["at"]) for e in steps]
    low, high = window
    assert all(low <= t <= high for t in times), (window, receipt, steps)
    assert unix(receipt["created_at"]) <= unix(receipt["started_at"]) <= unix(receipt["finished_at"])


@pytest.mark.parametrize("skew", SKEWS)
def test_a_worker_whose_clock_is_wrong_claims_runs_and_finishes_calls(tmp_path: Path, skew: int) -> None:
    with running_stack(tmp_path, workers=0) as stack:
        stack.start_worker(prefix=skewed(skew))
        before = database_now(stack.db)

        offset = worker_clock_offset(stack)  # what the worker's tools see
        assert abs(offset - skew) < 10, offset

        echo = submit(stack, "echo", {"skew": skew})
        added = submit(stack, "async_add", {"a": 2, "b": 3})
        read = submit(stack, "short_read", {"tag": "read", "seconds": 2})
        write = submit(stack, "short_write", {"tag": "write", "seconds": 1})
        wait_until(lambda: effects(stack.effects, "read", "start") == 1, 30, "the read to be running")
        # The lease is the tool's timeout (5 s) plus the grace (2 s) from the database's now(), not the worker's.
        lease_left = sql.value(stack.db, "SELECT extract(epoch FROM lease_expires_at - now()) FROM receipts "
                                         "WHERE id = %(id)s", id=read)
        assert lease_left is not None and 0 < float(lease_left) <= 7, lease_left

        finals = {receipt_id: stack.wait_terminal(receipt_id) for receipt_id in (echo, added, read, write)}
        window = (before, database_now(stack.db))
        assert_ran_once(stack, finals[echo], {"skew": skew}, window)
        assert_ran_once(stack, finals[added], {"sum": 5}, window)
        assert_ran_once(stack, finals[read], {"tag": "read"}, window)
        assert_ran_once(stack, finals[write], {"tag": "write"}, window)
        assert [effects(stack.effects, tag, "start") for tag in ("read", "write")] == [1, 1]


@pytest.mark.parametrize("skew", SKEWS)
def test_a_sweeper_whose_clock_is_wrong_reclaims_only_attempts_whose_lease_really_ended(
        tmp_path: Path, skew: int) -> None:
    with running_stack(tmp_path, beat=False) as stack:
        beat = stack.start_beat(prefix=skewed(skew))
        wait_until(lambda: beat_clock_offset(beat.log_path) is not None, 30, "beat to start")
        offset = beat_clock_offset(beat.log_path)
        assert offset is not None and abs(offset - skew) < 15, (offset, beat.log())

        # An attempt whose worker is gone: claimed with a 1 s lease, and nobody runs it. Only the
        # sweeper can bring it back, so its second attempt shows that the skewed sweeper sweeps.
        owner = stack.db.run(tenants.for_key(stack.api_key))
        assert owner is not None
        spec = stack.db.run(tools.find(owner.id, "short_read"))
        dead, _ = stack.db.run(calls.create(NewCall(tenant_id=owner.id, tool=spec, deadline_s=120,
                                                    arguments={"tag": "dead", "seconds": 0})))
        assert stack.db.run(calls.claim(dead.id, lease_s=1, actor="worker:gone")) is not None

        # Live attempts with 7 s leases (5 s timeout + 2 s grace), each running 4 s: a sweeper going by
        # a clock two minutes fast would take their leases for long expired, one two minutes slow
        # would never see the dead lease end.
        live_read = submit(stack, "short_read", {"tag": "live-read", "seconds": 4})
        live_write = submit(stack, "short_write", {"tag": "live-write", "seconds": 4})
        revived = stack.wait_terminal(dead.id, timeout=60)
        finals = [stack.wait_terminal(receipt_id, timeout=60) for receipt_id in (live_read, live_write)]

        assert (revived["status"], revived["attempt"]) == ("success", 2), stack.logs()
        assert ("running", "pending", 1, "sweeper") in [(e["from_status"], e["to_status"], e["attempt"], e["actor"])
                                                       for e in events(stack, dead.id)]
        for final, tag in zip(finals, ("live-read", "live-write"), strict=True):
            assert (final["status"], final["attempt"], final["error"]) == ("success", 1, None), stack.logs()
            assert final["output"] == {"tag": tag}
            assert not any(e["actor"] == "sweeper" for e in events(stack, final["id"]))
            assert effects(stack.effects, tag, "start") == effects(stack.effects, tag, "done") == 1
