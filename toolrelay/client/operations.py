"""The HTTP API as data: for each operation, the request to send and the parser of its answer.

Nothing here does I/O. :class:`~toolrelay.client.Client` and :class:`~toolrelay.client.AsyncClient`
send an :class:`Operation` with their own httpx client and hand the answer to ``Operation.parse``,
so every request is built once and every answer read once, whichever client sends it.

Optional fields are passed as keywords; a field left out or given as ``None`` is not sent, so the
server's default applies. A keyword the API does not have is a ``TypeError`` here, before anything
is sent. ``idempotency_key`` always travels as the ``Idempotency-Key`` header.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Literal, TypedDict, TypeVar, Unpack
from urllib.parse import quote

import httpx

from toolrelay.client import responses
from toolrelay.client.records import Batch, Event, Model, Page, Receipt, Run, Tool

T = TypeVar("T")

MAX_WAIT_S = 60.0  # the longest wait_s the gateway accepts on one request
USER_AGENT = "toolrelay-client/0.1"


class SubmitFields(TypedDict, total=False):
    """Optional fields of ``POST /v1/tool-calls``."""

    trace_id: str | None
    call_id: str | None
    idempotency_key: str | None
    metadata: Mapping[str, Any] | None
    timeout_s: float | None
    webhook_url: str | None
    wait_s: float | None


class ReceiptFilters(TypedDict, total=False):
    """Query of ``GET /v1/receipts``; ``limit`` is the page size, ``cursor`` where to start."""

    trace_id: str | None
    status: str | None
    tool: str | None
    parent_id: str | None
    limit: int | None
    cursor: str | None


class BatchFields(TypedDict, total=False):
    """Optional fields of ``POST /v1/batches``."""

    trace_id: str | None
    idempotency_key: str | None
    wait_s: float | None
    max_result_chars: int | None
    metadata: Mapping[str, Any] | None
    webhook_url: str | None


class RunFields(TypedDict, total=False):
    """Optional fields of ``POST /v1/runs``."""

    instructions: str | None
    max_iterations: int | None
    timeout_s: float | None
    max_result_chars: int | None
    trace_id: str | None
    idempotency_key: str | None
    metadata: Mapping[str, Any] | None
    webhook_url: str | None
    wait_s: float | None


class RunFilters(TypedDict, total=False):
    """Query of ``GET /v1/runs``."""

    trace_id: str | None
    status: str | None
    limit: int | None
    cursor: str | None


class _Unset:
    """The default of an argument whose every value, None included, means something."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass(frozen=True, slots=True)
class Operation(Generic[T]):
    """One exchange with the API: the request and the parser of its answer.

    ``holds_s`` is how long the server may hold the request before answering (a long-poll's
    ``wait_s``); the clients add it to their timeout, so a long-poll is never cut short.
    """

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: dict[str, str | int | float] = field(default_factory=dict)
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    holds_s: float = 0.0

    def timeout(self, base: float) -> httpx.Timeout:
        """The timeouts of this request for a client whose own timeout is ``base``: reading gets the hold on top."""
        return httpx.Timeout(base, read=base + self.holds_s)


def client_options(base_url: str, api_key: str) -> dict[str, Any]:
    """What every request carries: the base URL, the key, the SDK's user agent."""
    if not api_key:
        raise ValueError("api_key is required")
    return {"base_url": base_url,
            "headers": {"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT,
                        "Accept": "application/json, application/problem+json"}}


def with_cursor(operation: Operation[Page[T]], cursor: str) -> Operation[Page[T]]:
    """The same listing, from ``cursor`` on (the ``next_cursor`` of the page before)."""
    return replace(operation, params={**operation.params, "cursor": cursor})


def _segment(value: str) -> str:
    """An id as one path segment: required, and never able to reach another route."""
    if not value or value in (".", ".."):  # "" or a dot segment would name the listing or a parent route
        raise ValueError(f"not an id: {value!r}")
    return quote(value, safe="")


def _given(name: str, fields: Mapping[str, Any], allowed: type) -> dict[str, Any]:
    """The fields that were given a value; a name the API does not know is a TypeError."""
    known = allowed.__optional_keys__ | allowed.__required_keys__  # type: ignore[attr-defined]
    unknown = sorted(set(fields) - known)
    if unknown:
        raise TypeError(f"{name}() got unexpected field(s) {', '.join(unknown)}; "
                        f"it takes {', '.join(sorted(known))}")
    return {key: dict(value) if isinstance(value, Mapping) else value
            for key, value in fields.items() if value is not None}


def _accepting(name: str, path: str, parse: Callable[[httpx.Response], T], body: dict[str, Any],
               fields: Mapping[str, Any], allowed: type) -> Operation[T]:
    """A POST that creates something: the optional fields in the body, the idempotency key as a header."""
    given = _given(name, fields, allowed)
    key = given.pop("idempotency_key", None)
    return Operation("POST", path, parse, json={**body, **given},
                     headers={"Idempotency-Key": key} if key is not None else {},
                     holds_s=float(given.get("wait_s") or 0))


def _waiting(path: str, parse: Callable[[httpx.Response], T], wait_s: float | None) -> Operation[T]:
    """A GET that long-polls up to ``wait_s`` seconds when given."""
    if wait_s is None:
        return Operation("GET", path, parse)
    seconds = int(wait_s) if float(wait_s).is_integer() else wait_s  # wait_s=60 in the URL, not 60.0
    return Operation("GET", path, parse, params={"wait_s": seconds}, holds_s=float(wait_s))


_receipt = responses.one(Receipt)
_batch = responses.one(Batch)
_run = responses.one(Run)


def submit(tool: str, arguments: Mapping[str, Any] | None = None, **fields: Unpack[SubmitFields]) -> Operation[Receipt]:
    """``POST /v1/tool-calls``: 202 with the pending receipt; 200 when terminal within wait_s, or replayed."""
    return _accepting("submit", "/v1/tool-calls", _receipt,
                      {"tool": tool, "arguments": dict(arguments or {})}, fields, SubmitFields)


def get_receipt(receipt_id: str, wait_s: float | None = None) -> Operation[Receipt]:
    """``GET /v1/receipts/{id}``, long-polling up to ``wait_s`` (at most 60) for a terminal state."""
    return _waiting(f"/v1/receipts/{_segment(receipt_id)}", _receipt, wait_s)


def list_receipts(**filters: Unpack[ReceiptFilters]) -> Operation[Page[Receipt]]:
    """``GET /v1/receipts``: the first page; follow it with :func:`with_cursor`."""
    return Operation("GET", "/v1/receipts", responses.page(Receipt),
                     params=_given("list", filters, ReceiptFilters))


def events(receipt_id: str) -> Operation[Page[Event]]:
    """``GET /v1/receipts/{id}/events``: the timeline."""
    return Operation("GET", f"/v1/receipts/{_segment(receipt_id)}/events", responses.page(Event))


def cancel(receipt_id: str) -> Operation[Receipt]:
    """``POST /v1/receipts/{id}/cancel``."""
    return Operation("POST", f"/v1/receipts/{_segment(receipt_id)}/cancel", _receipt)


def submit_result(receipt_id: str, output: Any = UNSET,
                  error: str | Mapping[str, Any] | None = None) -> Operation[Receipt]:
    """``POST /v1/receipts/{id}/result``: exactly one of ``output`` (any JSON, null too) or ``error``.

    ``error`` is a message, or ``{"message": ..., "details": {...}}``.
    """
    if (output is UNSET) == (error is None):
        raise TypeError("submit_result() takes exactly one of output or error")
    if error is None:
        body: dict[str, Any] = {"output": output}
    else:
        body = {"error": {"message": error} if isinstance(error, str) else dict(error)}
    return Operation("POST", f"/v1/receipts/{_segment(receipt_id)}/result", _receipt, json=body)


def approve(receipt_id: str, by: str, comment: str | None = None) -> Operation[Receipt]:
    """``POST /v1/receipts/{id}/approve``: the call waiting for approval becomes pending and runs."""
    body = {"by": by} if comment is None else {"by": by, "comment": comment}
    return Operation("POST", f"/v1/receipts/{_segment(receipt_id)}/approve", _receipt, json=body)


def reject(receipt_id: str, by: str, reason: str | None = None) -> Operation[Receipt]:
    """``POST /v1/receipts/{id}/reject``: the call ends failed with code ``rejected``."""
    body = {"by": by} if reason is None else {"by": by, "reason": reason}
    return Operation("POST", f"/v1/receipts/{_segment(receipt_id)}/reject", _receipt, json=body)


def batch(format: str, message: Any, **fields: Unpack[BatchFields]) -> Operation[Batch]:
    """``POST /v1/batches``: a model's tool calls in its own ``format`` (openai_chat, openai_responses, anthropic)."""
    return _accepting("batch", "/v1/batches", _batch, {"format": format, "message": message},
                      fields, BatchFields)


def get_batch(batch_id: str, wait_s: float | None = None) -> Operation[Batch]:
    """``GET /v1/batches/{id}``, long-polling up to ``wait_s`` for it to complete."""
    return _waiting(f"/v1/batches/{_segment(batch_id)}", _batch, wait_s)


def run(model: str, input: str | Sequence[Mapping[str, Any]], tools: Sequence[str],
        **fields: Unpack[RunFields]) -> Operation[Run]:
    """``POST /v1/runs``: an agent run of ``model`` on ``input`` (text or chat messages) with ``tools``.

    202 with the run; 200 once it ended within ``wait_s``. Like GET, ``wait_s`` also ends at ``waiting``.
    """
    body = {"model": model, "input": input if isinstance(input, str) else [dict(m) for m in input],
            "tools": list(tools)}
    return _accepting("run", "/v1/runs", _run, body, fields, RunFields)


def get_run(run_id: str, wait_s: float | None = None) -> Operation[Run]:
    """``GET /v1/runs/{id}`` with its steps, long-polling up to ``wait_s`` until it ends or waits for someone."""
    return _waiting(f"/v1/runs/{_segment(run_id)}", _run, wait_s)


def list_runs(**filters: Unpack[RunFilters]) -> Operation[Page[Run]]:
    """``GET /v1/runs``: the first page; follow it with :func:`with_cursor`."""
    return Operation("GET", "/v1/runs", responses.page(Run), params=_given("list_runs", filters, RunFilters))


def cancel_run(run_id: str) -> Operation[Run]:
    """``POST /v1/runs/{id}/cancel``."""
    return Operation("POST", f"/v1/runs/{_segment(run_id)}/cancel", _run)


def list_tools() -> Operation[Page[Tool]]:
    """``GET /v1/tools``: the tenant's catalogue."""
    return Operation("GET", "/v1/tools", responses.page(Tool))


def vendor_tools(format: Literal["openai", "anthropic"]) -> Operation[list[Any]]:
    """``GET /v1/tools?format=``: the catalogue as that vendor's ``tools`` array, to hand to its model."""
    return Operation("GET", "/v1/tools", responses.json_array, params={"format": format})


def define_tool(definition: Mapping[str, Any]) -> Operation[Tool]:
    """``POST /v1/tools``: a function, api_call or integration tool of the tenant (409 if the name is taken)."""
    return Operation("POST", "/v1/tools", responses.one(Tool), json=dict(definition))


def define_model(name: str, base_url: str, model: str, api_key: str | None = None,
                 params: Mapping[str, Any] | None = None) -> Operation[Model]:
    """``PUT /v1/models/{name}``: an OpenAI-compatible Chat Completions endpoint runs may use."""
    body: dict[str, Any] = {"base_url": base_url, "model": model}
    if api_key is not None:
        body["api_key"] = api_key
    if params is not None:
        body["params"] = dict(params)
    return Operation("PUT", f"/v1/models/{_segment(name)}", responses.one(Model), json=body)
