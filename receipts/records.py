"""Immutable records that leave the store: receipts, events, catalogue entries, tenants and their keys."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from receipts.messages import Executable
from receipts.outbound.templates import public_definition
from receipts.states import TERMINAL

_ZERO = timedelta(0)
# The same format in PostgreSQL's to_char, for payloads rendered inside a statement (pg_statements.py).
PG_ISO_FORMAT = 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'


def iso(value: datetime | None) -> str | None:
    """ISO-8601 in UTC with microseconds and a ``Z`` suffix (always the same width), or None."""
    if value is None:
        return None
    if value.utcoffset() != _ZERO:
        value = value.astimezone(UTC)
    return value.isoformat(timespec="microseconds")[:-6] + "Z"  # "+00:00" -> "Z"


# The receipt's API shape: (column, is_timestamp), in order. to_api() and the PostgreSQL
# rendering of webhook payloads are both generated from this one list.
API_FIELDS: tuple[tuple[str, bool], ...] = (
    ("id", False),
    ("status", False),
    ("trace_id", False),
    ("tool", False),
    ("kind", False),
    ("call_id", False),
    ("input", False),
    ("parent_id", False),
    ("output", False),
    ("error", False),
    ("attempt", False),
    ("max_attempts", False),
    ("idempotency_key", False),
    ("metadata", False),
    ("approval", False),
    ("created_at", True),
    ("updated_at", True),
    ("started_at", True),
    ("finished_at", True),
    ("deadline_at", True),
)


@dataclass(frozen=True, slots=True)
class Receipt:
    """The record of one tool call (DESIGN.md, "Receipts")."""

    id: str
    tenant_id: str
    trace_id: str
    call_id: str | None
    parent_id: str | None
    tool: str
    kind: str
    status: str
    input: Any
    output: Any
    error: dict[str, Any] | None
    attempt: int
    max_attempts: int
    idempotency_key: str | None
    request_hash: str | None
    metadata: dict[str, Any]
    webhook_url: str | None
    effect: str
    idempotent: bool
    timeout_s: float
    queue: str
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    deadline_at: datetime
    available_at: datetime
    published_at: datetime | None
    lease_expires_at: datetime | None
    batch_id: str | None  # the batch (agent step) the call is one of, if any
    approval: dict[str, Any] | None  # a person's decision this call waits for or got (tools that require one)
    deadline_s: float | None  # the call's deadline, counted from acceptance (or from an approval)
    traceparent: str | None = None  # the W3C trace context the call was accepted under, if any

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> Receipt:
        return cls(**{name: row[name] for name in RECEIPT_COLUMNS})

    @classmethod
    def from_values(cls, values: tuple[Any, ...]) -> Receipt:
        """From a row whose first columns are :data:`RECEIPT_COLUMNS`, in that order.

        Every read makes receipts this way, so it sets the fields' slots straight from the row: a
        frozen class's ``__init__`` takes one ``object.__setattr__`` call per field, half the cost again.
        """
        if len(values) < _RECEIPT_WIDTH:
            raise TypeError(f"a receipt row has {_RECEIPT_WIDTH} columns, not {len(values)}")
        receipt = object.__new__(cls)
        for setter, value in zip(_RECEIPT_SLOTS, values, strict=False):  # its later columns are not the receipt's
            setter(receipt, value)
        return receipt

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def retry_safe(self) -> bool:
        """Whether running this call again cannot repeat a side effect."""
        return self.effect == "read" or self.idempotent

    def to_api(self) -> dict[str, Any]:
        """The JSON shape clients, webhooks and system tools see (the fields of ``API_FIELDS``)."""
        return {
            name: iso(getattr(self, name)) if is_time else getattr(self, name) for name, is_time in API_FIELDS
        }


# The receipts table's columns, in the order of Receipt's fields: statements select them in this order.
RECEIPT_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Receipt))
_RECEIPT_WIDTH = len(RECEIPT_COLUMNS)
_RECEIPT_SLOTS = tuple(getattr(Receipt, name).__set__ for name in RECEIPT_COLUMNS)


@dataclass(frozen=True, slots=True)
class Event:
    """One transition in a receipt's timeline."""

    id: int
    receipt_id: str
    at: datetime
    from_status: str | None
    to_status: str
    attempt: int
    actor: str
    detail: dict[str, Any]

    @classmethod
    def from_values(cls, values: tuple[Any, ...]) -> Event:
        return cls(*values)

    def to_api(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": iso(self.at),
            "from_status": self.from_status,
            "to_status": self.to_status,
            "attempt": self.attempt,
            "actor": self.actor,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A catalogue entry: what a tool takes and the contract it declares.

    An entry that declares no contract is a non-idempotent write, the safe reading (DESIGN.md,
    guarantee 3): never retried, ``outcome_unknown`` if its worker dies mid-run.
    """

    name: str
    kind: str
    description: str
    parameters: dict[str, Any]
    effect: str = "write"
    idempotent: bool = False
    timeout_s: float = 30.0
    max_attempts: int = 3
    queue: str = "tools"
    definition: dict[str, Any] = field(default_factory=dict)
    tenant_id: str = "*"
    requires_approval: bool = False
    approval_timeout_s: float | None = None  # None: TOOLRELAY_APPROVAL_TIMEOUT_S

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> ToolSpec:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})

    def to_api(self) -> dict[str, Any]:
        data = {
            "name": self.name,
            "kind": self.kind,
            "description": self.description,
            "parameters": self.parameters,
            "effect": self.effect,
            "idempotent": self.idempotent,
            "timeout_s": self.timeout_s,
            "max_attempts": self.max_attempts,
            "requires_approval": self.requires_approval,
        }
        if self.requires_approval:
            data["approval_timeout_s"] = self.approval_timeout_s
        if self.kind in ("api_call", "integration"):
            data["definition"] = public_definition(self.kind, self.definition)  # credentials masked
        return data


@dataclass(frozen=True, slots=True)
class Batch:
    """The tool calls of one agent step (``POST /v1/batches``) and, once all are terminal, the messages."""

    id: str
    tenant_id: str
    trace_id: str
    format: str
    status: str  # running | completed
    receipt_ids: list[str]
    idempotency_key: str | None
    request_hash: str | None
    max_result_chars: int
    metadata: dict[str, Any]
    webhook_url: str | None
    messages: list[dict[str, Any]] | None
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    def to_api(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "format": self.format, "trace_id": self.trace_id,
                "receipts": list(self.receipt_ids), "messages": self.messages, "metadata": self.metadata,
                "created_at": iso(self.created_at), "completed_at": iso(self.completed_at)}


BATCH_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Batch))


class BatchCall(Executable, Protocol):
    """A call of a batch as the request that opened it sees it: enough to publish the call (an
    :class:`~receipts.messages.Executable`) and to answer.

    A batch just opened answers with the store's entries it inserted (:class:`receipts.store.calls.Entry`:
    nothing of them is read back, so a step of many calls costs no more than its statement); a replay
    with the receipts its first opening made, read back.
    """

    @property
    def tool(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def error(self) -> dict[str, Any] | None: ...
    @property
    def terminal(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class RunStep:
    """One step of a run: a model call (``kind="model"``) or the tool calls it asked for (``"tools"``)."""

    run_id: str
    index: int
    kind: str
    data: dict[str, Any]
    created_at: datetime

    def to_api(self) -> dict[str, Any]:
        return {"index": self.index, "kind": self.kind, **self.data}


@dataclass(frozen=True, slots=True)
class Run:
    """An agent run: the loop (model, tools, model...) toolrelay runs until the model answers."""

    id: str
    tenant_id: str
    trace_id: str
    model: str
    status: str  # pending | running | waiting | success | failed | canceled
    instructions: str | None
    input: list[dict[str, Any]]
    tools: list[str]
    max_iterations: int
    max_result_chars: int
    metadata: dict[str, Any]
    webhook_url: str | None
    idempotency_key: str | None
    request_hash: str | None
    output: str | None
    error: dict[str, Any] | None
    iterations: int
    prompt_tokens: int
    completion_tokens: int
    attempt: int
    waiting_batch_id: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    deadline_at: datetime
    available_at: datetime
    published_at: datetime | None
    lease_expires_at: datetime | None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def to_api(self, steps: list[RunStep] | None = None) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id, "status": self.status, "trace_id": self.trace_id, "model": self.model,
            "output": self.output, "error": self.error, "iterations": self.iterations,
            "usage": {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens},
            "tools": list(self.tools), "max_iterations": self.max_iterations, "metadata": self.metadata,
            "created_at": iso(self.created_at), "updated_at": iso(self.updated_at),
            "finished_at": iso(self.finished_at), "deadline_at": iso(self.deadline_at),
        }
        if steps is not None:
            data["steps"] = [step.to_api() for step in steps]
        return data


RUN_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Run))


@dataclass(frozen=True, slots=True)
class Tenant:
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request comes from: the API key's tenant and what the key may do (its scopes).

    ``tools`` is the set of tools the key may see and call (None: every tool of its tenant); a
    ``read_only`` key may read but change nothing.
    """

    tenant: Tenant
    key_id: str
    tools: frozenset[str] | None = None
    read_only: bool = False

    @property
    def scoped(self) -> bool:
        """Whether the key is limited to some tools."""
        return self.tools is not None

    def may_use(self, tool: str) -> bool:
        """Whether the key may see and call ``tool`` (and read its receipts)."""
        return self.tools is None or tool in self.tools

    def visible(self, specs: list[ToolSpec]) -> list[ToolSpec]:
        """The catalogue entries among ``specs`` that the key may see."""
        return specs if self.tools is None else [spec for spec in specs if spec.name in self.tools]


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """An API key as an operator sees it (``toolrelay keys list``): never the key, only its prefix."""

    id: str
    tenant_id: str
    tenant: str
    prefix: str
    tools: list[str] | None
    read_only: bool
    expires_at: datetime | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    expired: bool  # by the database's clock, when it was read

    @property
    def state(self) -> str:
        """``active``, ``expired`` or ``revoked``."""
        return "revoked" if self.revoked_at is not None else "expired" if self.expired else "active"

    def to_api(self) -> dict[str, Any]:
        return {"id": self.id, "tenant": self.tenant, "prefix": self.prefix, "tools": self.tools,
                "read_only": self.read_only, "state": self.state, "expires_at": iso(self.expires_at),
                "created_at": iso(self.created_at), "last_used_at": iso(self.last_used_at),
                "revoked_at": iso(self.revoked_at)}


KEY_INFO_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(KeyInfo))


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a cursor-paginated listing."""

    items: list[Any]
    next_cursor: str | None
