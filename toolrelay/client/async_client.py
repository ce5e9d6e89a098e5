"""The asyncio client: the same operations as :class:`~toolrelay.client.Client`, over ``httpx.AsyncClient``.

Each method is one operation sent (or one flow of :mod:`~toolrelay.client.flows` driven), awaited;
requests and answers are built and read by the same code as the blocking client's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, TypeVar, Unpack, cast, overload

import httpx

from toolrelay.client import flows, operations
from toolrelay.client.errors import transport_errors
from toolrelay.client.operations import (
    UNSET,
    BatchFields,
    Operation,
    ReceiptFilters,
    RunFields,
    RunFilters,
    SubmitFields,
)
from toolrelay.client.records import Batch, Event, Model, Page, Receipt, Run, Tool

T = TypeVar("T")


class AsyncClient:
    """An asyncio client of toolrelay's HTTP API. Use it as ``async with`` (or await :meth:`aclose`).

    Takes the arguments of :class:`~toolrelay.client.Client`, with an ``httpx.AsyncBaseTransport``.
    Its methods are those of ``Client``, awaited; ``list`` and ``list_runs`` are async iterators.
    """

    def __init__(self, base_url: str, *, api_key: str, timeout: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._timeout = timeout
        self._http = httpx.AsyncClient(**operations.client_options(base_url, api_key), transport=transport)

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        await self.aclose()

    async def _send(self, operation: Operation[T]) -> T:
        with transport_errors(operation.method, operation.path):
            response = await self._http.request(operation.method, operation.path, params=operation.params,
                                                json=operation.json, headers=operation.headers,
                                                timeout=operation.timeout(self._timeout))
        return operation.parse(response)

    async def _drive(self, flow: Generator[Operation[Any], Any, T]) -> T:
        try:
            operation = next(flow)
            while True:
                operation = flow.send(await self._send(operation))
        except StopIteration as stop:
            return cast(T, stop.value)
        finally:
            flow.close()

    async def _every(self, first: Operation[Page[T]]) -> AsyncIterator[T]:
        pages = flows.paging(first)
        operation = next(pages)
        while True:
            page = await self._send(operation)
            for item in page.items:
                yield item
            try:
                operation = pages.send(page)
            except StopIteration:
                return

    async def _all(self, first: Operation[Page[T]]) -> list[T]:
        return [item async for item in self._every(first)]

    async def submit(self, tool: str, arguments: Mapping[str, Any] | None = None,
                     **fields: Unpack[SubmitFields]) -> Receipt:
        """Submit a tool call; the receipt once it is durably accepted (see :meth:`Client.submit`)."""
        return await self._send(operations.submit(tool, arguments, **fields))

    async def wait(self, receipt_id: str, timeout: float = 60.0) -> Receipt:
        """Wait for a receipt to be terminal, long-polling in slices of at most 60 s (``WaitTimeout`` after)."""
        return await self._drive(flows.waiting(receipt_id, timeout))

    async def get(self, receipt_id: str, wait_s: float | None = None) -> Receipt:
        """A receipt; with ``wait_s`` (at most 60), held until terminal or that many seconds pass."""
        return await self._send(operations.get_receipt(receipt_id, wait_s))

    async def events(self, receipt_id: str) -> list[Event]:
        """A receipt's timeline, oldest first."""
        return await self._all(operations.events(receipt_id))

    async def cancel(self, receipt_id: str) -> Receipt:
        """Cancel a call that has not finished (``Conflict`` if it has)."""
        return await self._send(operations.cancel(receipt_id))

    async def submit_result(self, receipt_id: str, *, output: Any = UNSET,
                            error: str | Mapping[str, Any] | None = None) -> Receipt:
        """Post a function tool's result: ``output`` (any JSON) or ``error`` (a message or ``{message, details}``)."""
        return await self._send(operations.submit_result(receipt_id, output, error))

    async def approve(self, receipt_id: str, by: str, comment: str | None = None) -> Receipt:
        """Approve a call waiting for approval: it becomes pending and runs."""
        return await self._send(operations.approve(receipt_id, by, comment))

    async def reject(self, receipt_id: str, by: str, reason: str | None = None) -> Receipt:
        """Refuse a call waiting for approval: it ends failed with code ``rejected``."""
        return await self._send(operations.reject(receipt_id, by, reason))

    async def batch(self, format: str, message: Any, **fields: Unpack[BatchFields]) -> Batch:
        """Run a model's tool calls, given in its own format (see :meth:`Client.batch`)."""
        return await self._send(operations.batch(format, message, **fields))

    async def get_batch(self, batch_id: str, wait_s: float | None = None) -> Batch:
        """A batch; with ``wait_s``, held until it completes or that many seconds pass."""
        return await self._send(operations.get_batch(batch_id, wait_s))

    async def run(self, model: str, input: str | Sequence[Mapping[str, Any]], tools: Sequence[str],
                  **fields: Unpack[RunFields]) -> Run:
        """Start an agent run of ``model`` on ``input`` with ``tools`` (see :meth:`Client.run`)."""
        return await self._send(operations.run(model, input, tools, **fields))

    async def get_run(self, run_id: str, wait_s: float | None = None) -> Run:
        """A run with its steps; with ``wait_s``, held until it ends, waits for someone, or that many seconds pass."""
        return await self._send(operations.get_run(run_id, wait_s))

    async def wait_run(self, run_id: str, timeout: float = 300.0) -> Run:
        """Wait for a run to end or to wait for someone (``WaitTimeout`` after), as :meth:`Client.wait_run`."""
        return await self._drive(flows.waiting_run(run_id, timeout))

    def list_runs(self, **filters: Unpack[RunFilters]) -> AsyncIterator[Run]:
        """Every run matching ``trace_id`` / ``status``, following the pages (``async for``)."""
        return self._every(operations.list_runs(**filters))

    async def cancel_run(self, run_id: str) -> Run:
        """Cancel a run that has not finished."""
        return await self._send(operations.cancel_run(run_id))

    @overload
    async def tools(self, format: None = None) -> list[Tool]: ...

    @overload
    async def tools(self, format: Literal["openai", "anthropic"]) -> list[dict[str, Any]]: ...

    async def tools(self, format: Literal["openai", "anthropic"] | None = None) -> list[Tool] | list[dict[str, Any]]:
        """The tenant's catalogue; with ``format``, as that vendor's ``tools`` array, ready for its model."""
        if format is None:
            return await self._all(operations.list_tools())
        return await self._send(operations.vendor_tools(format))

    async def define_tool(self, definition: Mapping[str, Any]) -> Tool:
        """Define a tool of the tenant (``kind`` function, api_call or integration; ``Conflict`` if taken)."""
        return await self._send(operations.define_tool(definition))

    async def define_model(self, name: str, *, base_url: str, model: str, api_key: str | None = None,
                           params: Mapping[str, Any] | None = None) -> Model:
        """Define (or replace) the model endpoint ``name`` that runs may use."""
        return await self._send(operations.define_model(name, base_url, model, api_key, params))

    # Last: below this definition, ``list`` in an annotation would name the method.
    def list(self, **filters: Unpack[ReceiptFilters]) -> AsyncIterator[Receipt]:
        """Every receipt matching the filters, newest first, following the pages (``async for``)."""
        return self._every(operations.list_receipts(**filters))
