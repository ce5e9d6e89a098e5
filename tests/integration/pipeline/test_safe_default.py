"""A tool that declares no contract is a non-idempotent write (DESIGN.md, guarantee 3), end to end.

The undeclared tools of tests/support/tools.py run on a real worker: the catalogue lists them as
non-idempotent writes, a retryable failure is not retried, and a worker killed mid-run leaves the
call ``outcome_unknown`` instead of running it again.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from tests.integration.pipeline.conftest import effects, wait_until
from tests.integration.pipeline.test_recovery import pool_children, post, timeline
from tests.support.stack import Stack, running_stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("stack")) as running:
        yield running


def test_an_undeclared_tool_is_listed_as_a_non_idempotent_write(stack: Stack) -> None:
    with stack.client() as client:
        tools = {t["name"]: t for t in client.get("/v1/tools").json()["data"]}
        one = client.get("/v1/tools/undeclared_slow").json()
    for name in ("undeclared_flaky", "undeclared_slow"):
        assert (tools[name]["effect"], tools[name]["idempotent"]) == ("write", False), tools[name]
    assert one == tools["undeclared_slow"]
    # The built-in tools say what they are.
    for name in ("echo", "sleep", "calculate", "current_time"):
        assert (tools[name]["effect"], tools[name]["idempotent"]) == ("read", True), tools[name]


def test_an_undeclared_tool_is_not_retried_after_a_retryable_failure(stack: Stack, tag: str) -> None:
    receipt_id = post(stack, "undeclared_flaky", {"tag": tag})
    final = stack.wait_terminal(receipt_id)
    assert (final["status"], final["attempt"]) == ("failed", 1), stack.logs()
    assert final["error"]["code"] == "tool_error"
    assert final["error"]["details"]["not_retried"] == "the tool is a non-idempotent write"
    assert effects(stack.effects, tag, "call") == 1
    assert [step[:3] for step in timeline(stack, receipt_id)][-1] == ("running", "failed", 1)


def test_an_undeclared_tool_whose_worker_dies_mid_run_ends_outcome_unknown(stack: Stack, tag: str) -> None:
    receipt_id = post(stack, "undeclared_slow", {"tag": tag, "seconds": 3})
    wait_until(lambda: effects(stack.effects, tag, "start") == 1, 30, "the tool to be running")
    worker = next(p for p in stack.processes if p.name == "worker1")
    for child in pool_children(worker.popen.pid):  # as the OOM killer would; the worker lives on
        os.kill(child, signal.SIGKILL)

    final = stack.wait_terminal(receipt_id, timeout=90)
    assert (final["status"], final["attempt"]) == ("failed", 1), stack.logs()
    assert final["error"]["code"] == "outcome_unknown"
    assert final["error"]["retryable"] is False
    assert timeline(stack, receipt_id)[-1] == ("running", "failed", 1, "sweeper")
    # Started once, never finished, never started again.
    assert effects(stack.effects, tag, "start") == 1
    assert effects(stack.effects, tag, "done") == 0
