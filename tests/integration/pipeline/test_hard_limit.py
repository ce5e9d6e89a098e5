"""The hard time limit is a real backstop: a sync tool that blocks its interruption ends ``timeout``.

The tool masks ``SIGALRM`` and ``SIGTERM``, so neither the interval timer at its 1 s timeout nor
anything but SIGKILL can stop it (as with a tool stuck in C code). The Celery hard
time limit (timeout + half the lease grace) kills its pool process, and the worker's main process
records the attempt as timed out then, long before the lease (timeout + grace) would have let the
sweeper settle it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.pipeline.conftest import effects, wait_until
from tests.integration.pipeline.test_recovery import post, timeline
from tests.support.clocks import unix
from tests.support.stack import Stack, running_stack

TIMEOUT_S = 1.0  # hang_unstoppable's
GRACE_S = 20.0
HARD_LIMIT_S = TIMEOUT_S + GRACE_S / 2  # receipts.messages.execute_call
LEASE_S = TIMEOUT_S + GRACE_S


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("stack"), lease_grace_s=GRACE_S) as running:
        yield running


def test_a_sync_tool_that_blocks_its_interruption_is_killed_and_ends_timeout(stack: Stack, tag: str) -> None:
    receipt_id = post(stack, "hang_unstoppable", {"tag": tag, "seconds": 60})
    wait_until(lambda: effects(stack.effects, tag, "start") == 1, 30, "the tool to be running")
    final = stack.wait_terminal(receipt_id, timeout=60)

    assert (final["status"], final["attempt"]) == ("failed", 1), stack.logs()
    assert final["error"]["code"] == "timeout", final["error"]
    assert final["error"]["retryable"] is False, (final, stack.logs())
    assert final["error"]["details"] == {"hard_time_limit_s": HARD_LIMIT_S}
    ran_for = unix(final["finished_at"]) - unix(final["started_at"])
    # Ended by the kill at the hard limit (not by the interval timer at 1 s, which the tool blocked),
    # and recorded then, well before the lease would have run out.
    assert HARD_LIMIT_S - 1 <= ran_for < LEASE_S, ran_for
    steps = timeline(stack, receipt_id)
    assert steps[-1][:3] == ("running", "failed", 1) and steps[-1][3].startswith("worker:"), steps
    assert effects(stack.effects, tag, "done") == 0  # stopped, not finished late


def test_the_worker_runs_calls_again_after_the_kill(stack: Stack) -> None:
    receipt_id = post(stack, "echo", {"after": "the kill"})
    final = stack.wait_terminal(receipt_id)
    assert (final["status"], final["output"]) == ("success", {"after": "the kill"}), stack.logs()
