"""Running one invocation under a time limit, sync and async alike."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from workers.errors import ToolTimeout
from workers.runner import Invocation, Runner

RELEASE = threading.Event()


@pytest.fixture(autouse=True)
def _release() -> Iterator[None]:
    RELEASE.clear()
    yield
    RELEASE.set()


def blocking() -> str:
    RELEASE.wait(20)
    return "late"


async def sleeping(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "late"


def own_timeout() -> None:
    raise TimeoutError("the upstream read timed out")


async def own_async_timeout() -> None:
    await asyncio.wait_for(asyncio.sleep(10), 0.01)


def test_results_of_sync_and_async_invocations() -> None:
    runner = Runner()
    assert runner.run(Invocation(lambda a, b: a + b, {"a": 1, "b": 2}), 5) == 3
    assert runner.run(Invocation(sleeping, {"seconds": 0}, is_async=True), 5) == "late"


@pytest.mark.parametrize("invocation", [Invocation(blocking), Invocation(sleeping, {"seconds": 20}, is_async=True)],
                         ids=["sync", "async"])
def test_the_limit_is_kept_and_named_in_the_error(invocation: Invocation) -> None:
    started = time.monotonic()
    with pytest.raises(ToolTimeout, match=r"within 1 s$"):
        Runner().run(invocation, 1)
    assert 1 <= time.monotonic() - started < 2


def test_an_async_tool_is_cancelled_at_its_limit() -> None:
    cancelled = threading.Event()

    async def tool() -> None:
        try:
            await asyncio.sleep(20)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(ToolTimeout):
        Runner().run(Invocation(tool, is_async=True), 0.5)
    assert cancelled.wait(5)


@pytest.mark.parametrize("invocation", [Invocation(own_timeout), Invocation(own_async_timeout, is_async=True)],
                         ids=["sync", "async"])
def test_a_tools_own_timeout_error_is_not_the_attempt_running_out_of_time(invocation: Invocation) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError) as caught:
        Runner().run(invocation, 30)
    assert not isinstance(caught.value, ToolTimeout)
    assert time.monotonic() - started < 5


def test_no_time_left_fails_before_running() -> None:
    ran = []
    with pytest.raises(ToolTimeout, match="no time left"):
        Runner().run(Invocation(lambda: ran.append(1)), 0)
    assert ran == []


def test_hung_threads_do_not_block_later_invocations() -> None:
    runner = Runner(max_threads=4)
    for _ in range(2):
        with pytest.raises(ToolTimeout):
            runner.run(Invocation(blocking), 0.2)
    assert runner.run(Invocation(lambda: "still working"), 5) == "still working"
