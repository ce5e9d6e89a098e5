"""The exchanges that take several requests, written once as generators both clients drive.

A flow yields the :class:`~toolrelay.client.operations.Operation` to send next and is sent back its
parsed answer; the client does the I/O in between, blocking or awaiting. So the slicing of
``wait`` and ``wait_run`` and the cursor-following of every listing are the same code under ``Client`` and
``AsyncClient``, and are tested without a network.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import TypeVar

from toolrelay.client.errors import UnexpectedResponse, WaitTimeout
from toolrelay.client.operations import MAX_WAIT_S, Operation, get_receipt, get_run, with_cursor
from toolrelay.client.records import Page, Receipt, Run

T = TypeVar("T")


def waiting(receipt_id: str, timeout: float,
            clock: Callable[[], float] = time.monotonic) -> Generator[Operation[Receipt], Receipt, Receipt]:
    """Long-poll a receipt until it is terminal, in slices of at most 60 s (the gateway's cap).

    Every request asks the gateway to hold it for the time left (at most 60 s), so a receipt that
    settles is seen at once and a long wait costs one request a minute. ``timeout`` 0 is one read.

    Returns:
        The terminal receipt.

    Raises:
        WaitTimeout: still not terminal when ``timeout`` seconds have passed; ``.receipt`` is the last read.
    """
    def late(receipt: Receipt) -> WaitTimeout:
        return WaitTimeout(f"{receipt_id} is still {receipt.status} after {timeout:g} s", receipt=receipt)

    return (yield from _long_poll(lambda wait_s: get_receipt(receipt_id, wait_s=wait_s),
                                  lambda receipt: receipt.terminal, late, timeout, clock))


def waiting_run(run_id: str, timeout: float,
                clock: Callable[[], float] = time.monotonic) -> Generator[Operation[Run], Run, Run]:
    """Long-poll a run until it ends or waits for someone (``waiting``), in slices of at most 60 s.

    A waiting run is returned rather than waited on: it goes on only once a person approves or rejects
    the call it waits for (or a client posts a function tool's result), which is for the caller to
    arrange; the gateway's long-poll answers at once for it too.

    Returns:
        The run, terminal or waiting.

    Raises:
        WaitTimeout: still pending or running when ``timeout`` seconds have passed; ``.run`` is the last read.
    """
    def late(run: Run) -> WaitTimeout:
        return WaitTimeout(f"{run_id} is still {run.status} after {timeout:g} s", run=run)

    return (yield from _long_poll(lambda wait_s: get_run(run_id, wait_s=wait_s),
                                  lambda run: run.terminal or run.waiting, late, timeout, clock))


def _long_poll(read: Callable[[float], Operation[T]], settled: Callable[[T], bool],
               late: Callable[[T], WaitTimeout], timeout: float,
               clock: Callable[[], float]) -> Generator[Operation[T], T, T]:
    """Read with the time left as ``wait_s`` (at most 60 s) until ``settled``, or raise ``late(last read)``."""
    if timeout < 0:
        raise ValueError("timeout must be >= 0")
    deadline = clock() + timeout
    while True:
        left = min(max(deadline - clock(), 0.0), MAX_WAIT_S)
        found = yield read(round(left, 3))
        if settled(found):
            return found
        if clock() >= deadline:
            raise late(found)


def paging(first: Operation[Page[T]]) -> Generator[Operation[Page[T]], Page[T], None]:
    """Every page of a listing: the first request, then one per ``next_cursor`` until it is null."""
    operation = first
    while True:
        page = yield operation
        if page.next_cursor is None:
            return
        if page.next_cursor == operation.params.get("cursor"):
            raise UnexpectedResponse(f"{first.path} answered the cursor it was given as next_cursor")
        operation = with_cursor(operation, page.next_cursor)
