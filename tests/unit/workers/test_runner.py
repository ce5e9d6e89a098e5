"""Running one invocation under a time limit, sync and async alike.

A sync tool runs on the calling thread when that is a process's main thread (interrupted by the
interval timer at its limit), and on a thread pool anywhere else; the tests run both ways. They use
pytest-timeout's thread method, which leaves the interval timer to the code under test.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from workers.errors import NoThreadFree, ToolTimeout
from workers.runner import Invocation, Runner, can_interrupt

pytestmark = pytest.mark.timeout(180, method="thread")

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


def on_main_thread(call: Callable[[], Any]) -> Any:
    assert can_interrupt()
    return call()


def on_another_thread(call: Callable[[], Any]) -> Any:
    def checked() -> Any:
        assert not can_interrupt()
        return call()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(checked).result()


PLACES = [pytest.param(on_main_thread, id="main-thread"), pytest.param(on_another_thread, id="other-thread")]


@pytest.mark.parametrize("place", PLACES)
def test_results_of_sync_and_async_invocations(place: Callable[[Callable[[], Any]], Any]) -> None:
    runner = Runner()
    assert place(lambda: runner.run(Invocation(lambda a, b: a + b, {"a": 1, "b": 2}), 5)) == 3
    assert place(lambda: runner.run(Invocation(sleeping, {"seconds": 0}, is_async=True), 5)) == "late"


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("invocation", [Invocation(blocking), Invocation(sleeping, {"seconds": 20}, is_async=True)],
                         ids=["sync", "async"])
def test_the_limit_is_kept_and_named_in_the_error(invocation: Invocation,
                                                  place: Callable[[Callable[[], Any]], Any]) -> None:
    started = time.monotonic()
    with pytest.raises(ToolTimeout, match=r"within 1 s$"):
        place(lambda: Runner().run(invocation, 1))
    # Not before the limit; and long before the tool's own 20 s, however loaded the machine.
    assert 1 <= time.monotonic() - started < 5


def test_a_sync_tool_on_the_main_thread_is_stopped_at_its_limit() -> None:
    after_sleep: list[int] = []
    ended: list[threading.Thread] = []

    def tool() -> None:
        try:
            time.sleep(30)
            after_sleep.append(1)
        finally:
            ended.append(threading.current_thread())

    with pytest.raises(ToolTimeout):
        Runner().run(Invocation(tool), 0.3)
    # By the time the runner answers, the tool has already ended on this thread, interrupted in its
    # sleep: a tool left running elsewhere would not have reached its finally yet.
    assert ended == [threading.main_thread()]
    assert after_sleep == []


def test_a_sync_tool_that_swallows_the_interruption_still_times_out() -> None:
    def stubborn() -> str:
        for _ in range(3):
            with contextlib.suppress(BaseException):  # what a careless tool does
                time.sleep(30)
        return "late"

    started = time.monotonic()
    with pytest.raises(ToolTimeout, match=r"within 0.3 s$"):
        Runner().run(Invocation(stubborn), 0.3)
    # Interrupted at 0.3 s, then every second until it gave up (about 2.3 s): a sleep left to run
    # its 30 s would take far longer than this.
    assert time.monotonic() - started < 15


def test_the_alarm_handler_and_timer_are_left_as_they_were() -> None:
    def handler(_signum: int, _frame: object) -> None:
        raise AssertionError("the runner's timer fired after the run")

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        runner = Runner()
        assert runner.run(Invocation(lambda: "fast"), 0.2) == "fast"
        with pytest.raises(ToolTimeout):
            runner.run(Invocation(blocking), 0.2)
        assert signal.getsignal(signal.SIGALRM) is handler
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        time.sleep(1.3)  # a repeating timer left armed would have fired by now
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_a_timer_someone_else_armed_is_not_touched() -> None:
    fired = threading.Event()
    previous = signal.signal(signal.SIGALRM, lambda _s, _f: fired.set())
    signal.setitimer(signal.ITIMER_REAL, 30)
    try:
        assert not can_interrupt()
        with pytest.raises(ToolTimeout):
            Runner().run(Invocation(blocking), 0.2)  # on a thread instead
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 25 < remaining <= 30
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not fired.is_set()


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
    assert cancelled.wait(30)


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("invocation", [Invocation(own_timeout), Invocation(own_async_timeout, is_async=True)],
                         ids=["sync", "async"])
def test_a_tools_own_timeout_error_is_not_the_attempt_running_out_of_time(
        invocation: Invocation, place: Callable[[Callable[[], Any]], Any]) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError) as caught:
        place(lambda: Runner().run(invocation, 30))
    assert not isinstance(caught.value, ToolTimeout)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("place", PLACES)
def test_no_time_left_fails_before_running(place: Callable[[Callable[[], Any]], Any]) -> None:
    ran: list[int] = []
    with pytest.raises(ToolTimeout, match="no time left"):
        place(lambda: Runner().run(Invocation(lambda: ran.append(1)), 0))
    assert ran == []


def test_hung_threads_do_not_block_later_invocations() -> None:
    runner = Runner(max_threads=4)
    for _ in range(2):
        with pytest.raises(ToolTimeout):
            on_another_thread(lambda: runner.run(Invocation(blocking), 0.2))
    assert on_another_thread(lambda: runner.run(Invocation(lambda: "still working"), 5)) == "still working"


@pytest.mark.parametrize("place", PLACES)
def test_a_tool_runs_in_the_callers_context_wherever_it_runs(place: Callable[[Callable[[], Any]], Any]) -> None:
    from receipts.telemetry import logfields

    async def async_fields() -> dict[str, str]:
        return dict(logfields.current())

    runner = Runner()

    def both() -> tuple[Any, Any]:
        with logfields.bound(receipt_id="rcpt_ctx"):
            return (runner.run(Invocation(lambda: dict(logfields.current())), 5),
                    runner.run(Invocation(async_fields, is_async=True), 5))

    assert place(both) == ({"receipt_id": "rcpt_ctx"}, {"receipt_id": "rcpt_ctx"})

def test_hung_sync_tools_cannot_exhaust_the_threads() -> None:
    """Where no thread can be stopped, sync tools that overran hold their threads; once they hold all of
    them the next sync tool is refused at once, with why, instead of timing out without having run."""
    runner = Runner(max_threads=2)
    for _ in range(2):
        with pytest.raises(ToolTimeout):
            on_another_thread(lambda: runner.run(Invocation(blocking), 0.2))
    assert runner.abandoned == 2

    ran: list[int] = []
    started = time.monotonic()
    with pytest.raises(NoThreadFree) as refused:
        on_another_thread(lambda: runner.run(Invocation(lambda: ran.append(1)), 30))
    assert time.monotonic() - started < 5  # at once, not after the 30 s limit
    assert ran == []
    assert refused.value.code == "internal" and refused.value.retryable
    assert "every thread for sync tools (2) is held, 2 of them by sync tools still running after their timeout" \
        in refused.value.message
    assert refused.value.details == {"threads": 2, "abandoned": 2}
    # Async tools do not need those threads.
    assert on_another_thread(lambda: runner.run(Invocation(sleeping, {"seconds": 0}, is_async=True), 5)) == "late"

    RELEASE.set()  # the hung tools end: their threads are free again
    deadline = time.monotonic() + 30
    while runner.abandoned and time.monotonic() < deadline:
        time.sleep(0.05)
    assert runner.abandoned == 0
    assert on_another_thread(lambda: runner.run(Invocation(lambda: "runs again"), 5)) == "runs again"
