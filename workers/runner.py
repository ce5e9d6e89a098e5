"""Running one tool invocation under a time limit, for sync and async tools alike.

Async tools run on one event loop thread per process and are cancelled at their limit.

A sync tool runs where it is cheapest to stop it. On the main thread of a process (a prefork
worker child) it runs right there, and an interval timer (``SIGALRM``) interrupts it at its limit:
the tool is stopped, not left running, and no thread hop is paid per call. The timer fires again
every second until the tool gives up, so a tool that swallows the interruption still ends as timed
out. Elsewhere (a thread of the embedded mode, or a process whose own interval timer is in use) the
tool runs on a thread pool; at its limit the caller stops waiting and the thread is abandoned (and
logged), since a thread cannot be stopped. Either way the attempt is recorded as timed out within
about a second of its limit. A tool that blocks the interruption (masks ``SIGALRM``, or is stuck in
C code) stops neither way: in a prefork worker the Celery hard time limit is the backstop that
kills its process, and the worker's main process records the attempt's timeout
(:mod:`workers.hard_limit`).

Wherever it runs, a tool runs in a copy of the caller's context (``contextvars``): the trace context
of its attempt's span and the log fields bound for its receipt follow it onto the thread or the loop.

The pool is bounded, and where nothing can kill a thread (the embedded mode) abandoned threads
would fill it for good: a sync tool waiting for a thread would then time out without ever running.
So the runner counts the threads its sync tools hold, and when every one is held it refuses the
next sync tool at once with :class:`NoThreadFree`, saying how many overran their timeout, rather
than queue it behind threads that may never come back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from workers.errors import NoThreadFree, ToolTimeout

log = logging.getLogger(__name__)

# After the first interruption, how often a sync tool that ignored it is interrupted again.
REPEAT_INTERRUPT_S = 1.0


@dataclass(frozen=True)
class Invocation:
    """A callable with its keyword arguments, ready to run."""

    fn: Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    is_async: bool = False


class _Interrupted(BaseException):
    """Raised inside a sync tool when its time is up (a BaseException: ``except Exception`` lets it pass)."""


def can_interrupt() -> bool:
    """Whether a sync tool can run on this thread and be interrupted by the interval timer."""
    return (hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
            and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))


async def _in_context(context: contextvars.Context, invocation: Invocation) -> Any:
    """Await ``invocation`` as a task of its own that runs in ``context`` (cancelling this cancels it)."""
    return await asyncio.get_running_loop().create_task(invocation.fn(**invocation.kwargs), context=context)


@dataclass
class _Slot:
    """One sync tool on a pool thread: whether it has returned, and whether its caller gave up on it."""

    finished: bool = False
    abandoned: bool = False


class Runner:
    """Runs invocations with a timeout. Threads and the loop start lazily, after any fork.

    ``max_threads`` bounds the threads sync tools hold at once, abandoned ones included.
    """

    def __init__(self, max_threads: int = 64) -> None:
        self._max_threads = max_threads
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._held = 0  # pool threads running a sync tool (abandoned or not)
        self._abandoned = 0  # of those, the ones whose caller stopped waiting at the limit

    @property
    def abandoned(self) -> int:
        """Sync tools still running on a pool thread after their timeout."""
        return self._abandoned

    def run(self, invocation: Invocation, timeout: float) -> Any:
        """The invocation's result, or :class:`ToolTimeout` after ``timeout`` seconds."""
        if timeout <= 0:
            raise ToolTimeout("no time left before the call's deadline")
        if not invocation.is_async and can_interrupt():
            return self._run_here(invocation, timeout)
        context = contextvars.copy_context()
        if invocation.is_async:
            future = asyncio.run_coroutine_threadsafe(_in_context(context, invocation), self._event_loop())
            return self._wait(future, timeout, invocation)
        slot = _Slot()
        return self._wait(self._submit(invocation, slot, context), timeout, invocation, slot)

    def _submit(self, invocation: Invocation, slot: _Slot,
                context: contextvars.Context) -> concurrent.futures.Future[Any]:
        """Start a sync tool on a pool thread (in ``context``), or refuse it at once when every thread is held."""
        with self._lock:
            if self._held >= self._max_threads:
                raise NoThreadFree(f"not started: every thread for sync tools ({self._max_threads}) is held, "
                                   f"{self._abandoned} of them by sync tools still running after their timeout "
                                   "(they cannot be stopped; restarting the process frees them)",
                                   details={"threads": self._max_threads, "abandoned": self._abandoned})
            self._held += 1

        def run() -> Any:
            try:
                return context.run(invocation.fn, **invocation.kwargs)
            finally:
                with self._lock:
                    slot.finished = True
                    self._held -= 1
                    if slot.abandoned:
                        self._abandoned -= 1

        try:
            return self._threads().submit(run)
        except BaseException:
            with self._lock:
                self._held -= 1
            raise

    @staticmethod
    def _run_here(invocation: Invocation, timeout: float) -> Any:
        """Run a sync tool on this (main) thread; interrupt it with ``SIGALRM`` when its time is up.

        Once the timer has fired the attempt has timed out, whatever the tool does next: ends on
        the interruption, raises something else, or swallows it and returns late.
        """
        fired = False

        def interrupt(_signum: int, _frame: FrameType | None) -> None:
            nonlocal fired
            fired = True
            raise _Interrupted

        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout, REPEAT_INTERRUPT_S)
            try:
                result = invocation.fn(**invocation.kwargs)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)  # it may fire just before this line: caught below
        except BaseException:
            if not fired:
                raise
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        if fired:
            raise ToolTimeout(f"the attempt did not finish within {timeout:g} s")
        return result

    def _wait(self, future: concurrent.futures.Future[Any], timeout: float, invocation: Invocation,
              slot: _Slot | None = None) -> Any:
        try:
            return future.result(timeout)
        except TimeoutError as exc:  # concurrent.futures.TimeoutError is TimeoutError
            if future.done():
                raise  # the tool's own TimeoutError (a socket's, say): it failed, it did not run out of time
            # Cancelling an async tool's future cancels its task on the loop; a sync tool's thread
            # cannot be stopped, so it is left to finish on its own (and counted until it does).
            cancelled = future.cancel()  # True only for a sync tool that never got a thread
            if slot is not None:
                with self._lock:
                    if cancelled:
                        self._held -= 1
                    elif not slot.finished:
                        slot.abandoned = True
                        self._abandoned += 1
                if not cancelled:
                    log.warning("tool %s still running after its timeout; its thread is abandoned (%d of %d held "
                                "by abandoned tools)", getattr(invocation.fn, "__name__", invocation.fn),
                                self._abandoned, self._max_threads)
            raise ToolTimeout(f"the attempt did not finish within {timeout:g} s") from exc

    def _threads(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self._max_threads, thread_name_prefix="tool")
            return self._pool

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="tool-loop", daemon=True).start()
                self._loop = loop
            return self._loop
