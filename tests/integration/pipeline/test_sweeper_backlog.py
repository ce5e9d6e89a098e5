"""The sweeper keeps deadlines behind a backlog of minutes of work (DESIGN.md, guarantee 1).

Every worker process is busy with a long ``sleep`` and many more wait in the queue; a call with a
short deadline queued behind them must still end ``failed``/``expired`` close to its deadline, which
only a sweep that does not wait in that queue can do.
"""

from __future__ import annotations

from pathlib import Path

from tests.integration.pipeline.conftest import wait_until
from tests.integration.pipeline.test_recovery import post
from tests.support import sql
from tests.support.clocks import unix
from tests.support.stack import running_stack

SLEEP_S = 20
BACKLOG = 16  # 16 x 20 s of work for the worker's 2 processes: over two and a half minutes


def test_a_short_deadline_holds_behind_minutes_of_queued_work(tmp_path: Path) -> None:
    with running_stack(tmp_path) as stack:  # one worker with 2 processes, and beat
        try:
            backlog = [post(stack, "sleep", {"seconds": SLEEP_S}) for _ in range(BACKLOG)]
            count = "SELECT count(*) FROM receipts WHERE status = %(status)s AND id = ANY(%(ids)s)"
            wait_until(lambda: sql.value(stack.db, count, status="running", ids=backlog) == 2, 60,
                       "both worker processes to be busy")

            with stack.client() as client:
                response = client.post("/v1/tool-calls", json={"tool": "echo", "arguments": {"late": True},
                                                               "timeout_s": 3})
            assert response.status_code == 202, response.text
            final = stack.wait_terminal(response.json()["id"], timeout=60)

            assert final["status"] == "failed", (final, stack.logs())
            assert final["error"]["code"] == "expired"
            # Ended by a sweep close to its deadline, not when the backlog let a worker reach it (a
            # loaded machine is allowed a few seconds; the backlog is minutes).
            lag = unix(final["finished_at"]) - unix(final["deadline_at"])
            assert 0 <= lag < 10, (lag, final)
            assert sql.value(stack.db, count, status="pending", ids=backlog) >= BACKLOG - 6  # still queued
        finally:
            for process in stack.processes:
                if process.name.startswith("worker"):
                    process.kill()  # SIGKILL: a warm shutdown would wait for the sleeps
