"""The blocking client: sends the operations of :mod:`~toolrelay.client.operations` over ``httpx.Client``.

Each method is one operation sent (or one flow of :mod:`~toolrelay.client.flows` driven); the
request and the reading of the answer live there, shared with :class:`~toolrelay.client.AsyncClient`.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
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


class Client:
    """A client of toolrelay's HTTP API. Use it as a context manager (or call :meth:`close`).

    Args:
        base_url: where the gateway serves, e.g. ``http://127.0.0.1:8000``.
        api_key: the tenant's API key, sent as ``Authorization: Bearer``.
        timeout: seconds each request may take; a long-poll gets its ``wait_s`` on top.
        transport: an httpx transport to send through instead of the network (tests, proxies).

    Every method raises a :class:`~toolrelay.client.errors.ToolrelayError` subclass on failure.
    """

    def __init__(self, base_url: str, *, api_key: str, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self._timeout = timeout
        self._http = httpx.Client(**operations.client_options(base_url, api_key), transport=transport)

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def _send(self, operation: Operation[T]) -> T:
        with transport_errors(operation.method, operation.path):
            response = self._http.request(operation.method, operation.path, params=operation.params,
                                          json=operation.json, headers=operation.headers,
                                          timeout=operation.timeout(self._timeout))
        return operation.parse(response)

    def _drive(self, flow: Generator[Operation[Any], Any, T]) -> T:
        try:
            operation = next(flow)
            while True:
                operation = flow.send(self._send(operation))
        except StopIteration as stop:
            return cast(T, stop.value)
        finally:
            flow.close()

    def _every(self, first: Operation[Page[T]]) -> Iterator[T]:
        pages = flows.paging(first)
        operation = next(pages)
        while True:
            page = self._send(operation)
            yield from page.items
            try:
                operation = pages.send(page)
            except StopIteration:
                return

    def submit(self, tool: str, arguments: Mapping[str, Any] | None = None,
               **fields: Unpack[SubmitFields]) -> Receipt:
        """Submit a tool call; the receipt once it is durably accepted.

        Args:
            tool: the tool's name.
            arguments: its arguments, checked against the tool's schema before anything is stored.
            **fields: ``trace_id``, ``call_id``, ``idempotency_key`` (sent as ``Idempotency-Key``: the same
                key and request give back the same receipt), ``metadata``, ``timeout_s`` (the call's
                deadline), ``webhook_url``, ``wait_s`` (wait up to that long for a terminal state).
        """
        return self._send(operations.submit(tool, arguments, **fields))

    def wait(self, receipt_id: str, timeout: float = 60.0) -> Receipt:
        """Wait for a receipt to be terminal, long-polling in slices of at most 60 s.

        Raises:
            WaitTimeout: still not terminal after ``timeout`` seconds (``.receipt`` has it as last seen).
        """
        return self._drive(flows.waiting(receipt_id, timeout))

    def get(self, receipt_id: str, wait_s: float | None = None) -> Receipt:
        """A receipt; with ``wait_s`` (at most 60), held until terminal or that many seconds pass."""
        return self._send(operations.get_receipt(receipt_id, wait_s))

    def events(self, receipt_id: str) -> list[Event]:
        """A receipt's timeline, oldest first: every transition, by whom, when, on which attempt."""
        return list(self._every(operations.events(receipt_id)))

    def cancel(self, receipt_id: str) -> Receipt:
        """Cancel a call that has not finished (``Conflict`` if it has)."""
        return self._send(operations.cancel(receipt_id))

    def submit_result(self, receipt_id: str, *, output: Any = UNSET,
                      error: str | Mapping[str, Any] | None = None) -> Receipt:
        """Post a function tool's result: ``output`` (any JSON) or ``error`` (a message or ``{message, details}``)."""
        return self._send(operations.submit_result(receipt_id, output, error))

    def approve(self, receipt_id: str, by: str, comment: str | None = None) -> Receipt:
        """Approve a call waiting for approval: it becomes pending and runs."""
        return self._send(operations.approve(receipt_id, by, comment))

    def reject(self, receipt_id: str, by: str, reason: str | None = None) -> Receipt:
        """Refuse a call waiting for approval: it ends failed with code ``rejected``."""
        return self._send(operations.reject(receipt_id, by, reason))

    def batch(self, format: str, message: Any, **fields: Unpack[BatchFields]) -> Batch:
        """Run a model's tool calls, given in its own format; with ``messages`` to append once completed.

        Args:
            format: ``openai_chat``, ``openai_responses`` or ``anthropic``.
            message: the assistant message (or the Responses ``output`` list) holding the calls.
            **fields: ``trace_id``, ``idempotency_key``, ``wait_s`` (server default 30), ``max_result_chars``,
                ``metadata``, ``webhook_url``.
        """
        return self._send(operations.batch(format, message, **fields))

    def get_batch(self, batch_id: str, wait_s: float | None = None) -> Batch:
        """A batch; with ``wait_s``, held until it completes or that many seconds pass."""
        return self._send(operations.get_batch(batch_id, wait_s))

    def run(self, model: str, input: str | Sequence[Mapping[str, Any]], tools: Sequence[str],
            **fields: Unpack[RunFields]) -> Run:
        """Start an agent run: ``model`` (a name defined with :meth:`define_model`) on ``input`` with ``tools``.

        Args:
            **fields: ``instructions``, ``max_iterations``, ``timeout_s``, ``max_result_chars``, ``trace_id``,
                ``idempotency_key``, ``metadata``, ``webhook_url``, ``wait_s``.
        """
        return self._send(operations.run(model, input, tools, **fields))

    def get_run(self, run_id: str, wait_s: float | None = None) -> Run:
        """A run with its steps; with ``wait_s`` (at most 60), held until it ends, waits for someone
        (``waiting``: a call needs a person's approval), or that many seconds pass."""
        return self._send(operations.get_run(run_id, wait_s))

    def wait_run(self, run_id: str, timeout: float = 300.0) -> Run:
        """Wait for a run to end or to wait for someone, long-polling in slices of at most 60 s.

        A ``waiting`` run is returned (``run.waiting``): it goes on once its calls waiting for approval
        are approved or rejected; call ``wait_run`` again after deciding.

        Raises:
            WaitTimeout: still pending or running after ``timeout`` seconds (``.run`` has it as last seen).
        """
        return self._drive(flows.waiting_run(run_id, timeout))

    def list_runs(self, **filters: Unpack[RunFilters]) -> Iterator[Run]:
        """Every run matching ``trace_id`` / ``status``, following the pages (``limit`` is the page size)."""
        return self._every(operations.list_runs(**filters))

    def cancel_run(self, run_id: str) -> Run:
        """Cancel a run that has not finished."""
        return self._send(operations.cancel_run(run_id))

    @overload
    def tools(self, format: None = None) -> list[Tool]: ...

    @overload
    def tools(self, format: Literal["openai", "anthropic"]) -> list[dict[str, Any]]: ...

    def tools(self, format: Literal["openai", "anthropic"] | None = None) -> list[Tool] | list[dict[str, Any]]:
        """The tenant's catalogue; with ``format``, as that vendor's ``tools`` array, ready for its model."""
        if format is None:
            return list(self._every(operations.list_tools()))
        return self._send(operations.vendor_tools(format))

    def define_tool(self, definition: Mapping[str, Any]) -> Tool:
        """Define a tool of the tenant (``kind`` function, api_call or integration; ``Conflict`` if taken)."""
        return self._send(operations.define_tool(definition))

    def define_model(self, name: str, *, base_url: str, model: str, api_key: str | None = None,
                     params: Mapping[str, Any] | None = None) -> Model:
        """Define (or replace) the model endpoint ``name`` that runs may use."""
        return self._send(operations.define_model(name, base_url, model, api_key, params))

    # Last: below this definition, ``list`` in an annotation would name the method.
    def list(self, **filters: Unpack[ReceiptFilters]) -> Iterator[Receipt]:
        """Every receipt matching the filters, newest first, following the pages as it goes.

        Args:
            **filters: ``trace_id``, ``status``, ``tool``, ``parent_id``; ``limit`` is the page size
                (1-200), not a total; ``cursor`` starts from a ``next_cursor``.
        """
        return self._every(operations.list_receipts(**filters))
