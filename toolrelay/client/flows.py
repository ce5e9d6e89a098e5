"""The exchanges that take several requests, written once as generators both clients drive.

A flow yields the :class:`~toolrelay.client.operations.Operation` to send next and is sent back its
parsed answer; the client does the I/O in between, blocking or awaiting. So the slicing of
``wait`` and the cursor-following of every listing are the same code under ``Client`` and
``AsyncClient``, and are tested without a network.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import TypeVar

from toolrelay.client.errors import UnexpectedResponse, WaitTimeout
from toolrelay.client.operations import MAX_WAIT_S, Operation, get_receipt, with_cursor
from toolrelay.client.records import Page, Receipt

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
    if timeout < 0:
        raise ValueError("timeout must be >= 0")
    deadline = clock() + timeout
    while True:
        left = min(max(deadline - clock(), 0.0), MAX_WAIT_S)
        receipt = yield get_receipt(receipt_id, wait_s=round(left, 3))
        if receipt.terminal:
            return receipt
        if clock() >= deadline:
            raise WaitTimeout(f"{receipt_id} is still {receipt.status} after {timeout:g} s", receipt=receipt)


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
