"""What the API returns, as immutable records: receipts, their events, batches, runs, tools, models.

Each record has the API's fields as attributes, timestamps as aware ``datetime`` objects and lists of
ids as tuples; JSON payloads (``input``, ``output``, ``metadata``, messages, steps) stay as parsed.
Fields the server adds later are kept in ``extra`` instead of failing, so an older SDK keeps working
against a newer gateway; a field the contract requires but the answer lacks is an
:class:`~toolrelay.client.errors.UnexpectedResponse`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from toolrelay.client.errors import UnexpectedResponse

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

R = TypeVar("R", bound="DataclassInstance")
T = TypeVar("T")

RECEIPT_TERMINAL = frozenset({"success", "failed", "partially_succeeded", "canceled"})
RUN_TERMINAL = frozenset({"success", "failed", "canceled"})


def parse_time(value: str) -> datetime:
    """An ISO-8601 timestamp of the API (``2026-11-29T19:30:02.933587Z``)."""
    return datetime.fromisoformat(value)


def _converted(parse: Callable[[Any], Any], **kwargs: Any) -> Any:
    """A field whose JSON value goes through ``parse`` (a JSON null stays None)."""
    return field(metadata={"parse": parse}, **kwargs)


def _time(**kwargs: Any) -> Any:
    return _converted(parse_time, **kwargs)


def _ids(**kwargs: Any) -> Any:
    return _converted(tuple, **kwargs)


def record(cls: type[R], data: object) -> R:
    """Build the record ``cls`` from the API's JSON object ``data``; unknown keys go to ``extra``."""
    if not isinstance(data, dict):
        raise UnexpectedResponse(f"expected a JSON object for a {cls.__name__}, got {type(data).__name__}")
    values: dict[str, Any] = {}
    for spec in fields(cls):
        if spec.name == "extra":
            continue
        if spec.name not in data:
            if spec.default is MISSING and spec.default_factory is MISSING:
                raise UnexpectedResponse(f"a {cls.__name__} without {spec.name!r}: {data!r:.300}")
            continue
        value = data[spec.name]
        parse = spec.metadata.get("parse")
        if parse is not None and value is not None:
            try:
                value = parse(value)
            except (TypeError, ValueError) as exc:
                raise UnexpectedResponse(f"{cls.__name__}.{spec.name} is not valid: {value!r:.100}") from exc
        values[spec.name] = value
    values["extra"] = {key: value for key, value in data.items() if key not in values and key != "extra"}
    return cls(**values)


@dataclass(frozen=True, slots=True)
class Receipt:
    """One tool call as toolrelay recorded it: what was asked, its state, its result or error."""

    id: str
    status: str
    trace_id: str
    tool: str
    kind: str
    input: Any
    attempt: int
    max_attempts: int
    created_at: datetime = _time()
    updated_at: datetime = _time()
    deadline_at: datetime = _time()
    call_id: str | None = None
    parent_id: str | None = None
    output: Any = None
    error: dict[str, Any] | None = None  # {code, message, retryable, retry_after_ms, details}
    idempotency_key: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    started_at: datetime | None = _time(default=None)
    finished_at: datetime | None = _time(default=None)
    approval: dict[str, Any] | None = None  # {"state": "requested", ...} for a tool that requires approval
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        """Whether the receipt is final: success, failed, partially_succeeded or canceled."""
        return self.status in RECEIPT_TERMINAL


@dataclass(frozen=True, slots=True)
class Event:
    """One transition in a receipt's timeline: who or what made it, when, on which attempt."""

    id: int
    to_status: str
    attempt: int
    actor: str
    at: datetime = _time()
    from_status: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Batch:
    """A model's tool calls run together, and the messages to append for the model (when completed)."""

    id: str
    status: str  # running | completed
    trace_id: str
    receipts: tuple[str, ...] = _ids()
    created_at: datetime = _time()
    format: str | None = None  # openai_chat | openai_responses | anthropic
    messages: list[dict[str, Any]] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    completed_at: datetime | None = _time(default=None)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        """Whether every call of the batch is terminal (its ``messages`` are then set)."""
        return self.status == "completed"


@dataclass(frozen=True, slots=True)
class Run:
    """An agent run: the loop of model calls and tool calls toolrelay drives, with every step recorded.

    ``steps`` are the API's, in order: ``{"index", "kind": "model", "request_messages", "response"
    (the assistant message), "usage", "latency_ms"}`` and ``{"index", "kind": "tools", "batch_id",
    "receipts", "messages" (None until every call ended), "refused", "order"}``. A listing
    (``list_runs``) carries no steps: ``get_run`` has them.
    """

    id: str
    status: str  # pending | running | waiting | success | failed | canceled
    trace_id: str
    model: str
    created_at: datetime = _time()
    updated_at: datetime = _time()
    output: str | None = None
    error: dict[str, Any] | None = None  # {code, message, ...}: max_iterations, loop_detected, timeout, ...
    iterations: int = 0  # model calls so far
    usage: dict[str, Any] = field(default_factory=dict)  # {prompt_tokens, completion_tokens}
    tools: tuple[str, ...] = _ids(default=())  # the only tools offered to the model
    max_iterations: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    finished_at: datetime | None = _time(default=None)
    deadline_at: datetime | None = _time(default=None)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        """Whether the run is final: success, failed or canceled."""
        return self.status in RUN_TERMINAL

    @property
    def waiting(self) -> bool:
        """Whether the run waits for someone: a call of its last tool step needs a person's approval
        (or a client's result), and the run goes on once it has it."""
        return self.status == "waiting"

    @property
    def receipt_ids(self) -> tuple[str, ...]:
        """The receipts of the run's tool calls, step by step (empty for a run read from a listing)."""
        return tuple(receipt for step in self.steps if step.get("kind") == "tools"
                     for receipt in step.get("receipts") or ())


@dataclass(frozen=True, slots=True)
class Tool:
    """A catalogue entry: what a tool takes (a JSON Schema) and the contract it declares."""

    name: str
    kind: str
    description: str
    parameters: dict[str, Any]
    effect: str
    idempotent: bool
    timeout_s: float
    max_attempts: int
    requires_approval: bool = False  # each call waits for a person's approval before it runs
    approval_timeout_s: float | None = None  # how long a call waits for it (None: the server's default)
    definition: dict[str, Any] | None = None  # api_call and integration tools, credentials masked
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Model:
    """A model endpoint runs may use (its API key is never shown)."""

    name: str
    base_url: str | None = None
    model: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    api_key_set: bool = False  # whether a key is stored (it is never shown)
    created_at: datetime | None = _time(default=None)
    updated_at: datetime | None = _time(default=None)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing, and the cursor of the next (None on the last)."""

    items: tuple[T, ...]
    next_cursor: str | None
