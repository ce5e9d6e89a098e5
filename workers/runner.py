"""Running one tool invocation under a time limit, for sync and async tools alike.

Sync tools run on a thread pool, async tools on one event loop thread per process. Either way the
caller waits at most ``timeout`` seconds: an async tool is cancelled at its limit; a sync tool cannot
be interrupted, so its thread is abandoned (and logged) while the attempt is recorded as timed out.
The Celery hard time limit on the task is the backstop that recycles a process whose own code hangs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workers.errors import ToolTimeout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Invocation:
    """A callable with its keyword arguments, ready to run."""

    fn: Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    is_async: bool = False


class Runner:
    """Runs invocations with a timeout. Threads and the loop start lazily, after any fork."""

    def __init__(self, max_threads: int = 64) -> None:
        self._max_threads = max_threads
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def run(self, invocation: Invocation, timeout: float) -> Any:
        """The invocation's result, or :class:`ToolTimeout` after ``timeout`` seconds."""
        if timeout <= 0:
            raise ToolTimeout("no time left before the call's deadline")
        future: concurrent.futures.Future[Any]
        if invocation.is_async:
            future = asyncio.run_coroutine_threadsafe(invocation.fn(**invocation.kwargs), self._event_loop())
        else:
            future = self._threads().submit(invocation.fn, **invocation.kwargs)
        return self._wait(future, timeout, invocation)

    def _wait(self, future: concurrent.futures.Future[Any], timeout: float, invocation: Invocation) -> Any:
        try:
            return future.result(timeout)
        except TimeoutError as exc:  # concurrent.futures.TimeoutError is TimeoutError
            if future.done():
                raise  # the tool's own TimeoutError (a socket's, say): it failed, it did not run out of time
            # Cancelling an async tool's future cancels its task on the loop; a sync tool's thread
            # cannot be stopped, so it is left to finish on its own.
            future.cancel()
            if not invocation.is_async:
                log.warning("tool %s still running after its timeout; its thread is abandoned",
                            getattr(invocation.fn, "__name__", invocation.fn))
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
