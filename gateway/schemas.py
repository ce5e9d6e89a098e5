"""Request and response bodies of the HTTP API (pydantic, at the edge only)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ToolCallRequest(BaseModel):
    """``POST /v1/tool-calls``."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(min_length=1, max_length=64, description="Name of a tool in the catalogue.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Validated against the tool's schema.")
    trace_id: str | None = Field(default=None, min_length=1, max_length=200)
    call_id: str | None = Field(default=None, min_length=1, max_length=200, description="The model's tool_call id.")
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=255)
    metadata: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float | None = Field(default=None, gt=0, description="Deadline for the whole call, all attempts.")
    webhook_url: str | None = Field(default=None, max_length=2048)
    wait_s: float | None = Field(default=None, ge=0, le=60, description="Wait up to this long for a terminal state.")


class BatchRequest(BaseModel):
    """``POST /v1/batches``: a model's tool calls in its own format."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["openai_chat", "openai_responses", "anthropic"] = Field(
        description="The vendor format of `message`.")
    message: Any = Field(description="openai_chat: the assistant message with tool_calls; openai_responses: the "
                                     "response's output list; anthropic: the assistant message with tool_use blocks.")
    trace_id: str | None = Field(default=None, min_length=1, max_length=200)
    wait_s: float = Field(default=30, ge=0, le=60, description="Wait up to this long for every call to end.")
    max_result_chars: int = Field(default=16_000, ge=200, le=1_000_000,
                                  description="Longer tool results are cut for the model (head and tail kept).")
    metadata: dict[str, Any] = Field(default_factory=dict)
    webhook_url: str | None = Field(default=None, max_length=2048)


class BatchBody(BaseModel):
    """A batch: its receipts in call order and, once every call ended, the messages to append."""

    id: str
    status: Literal["running", "completed"]
    format: str
    trace_id: str
    receipts: list[str]
    messages: list[dict[str, Any]] | None
    metadata: dict[str, Any]
    created_at: str
    completed_at: str | None


class ModelRequest(BaseModel):
    """``PUT /v1/models/{name}``: an OpenAI-compatible Chat Completions endpoint."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(min_length=1, max_length=2048, description="e.g. https://api.openai.com/v1")
    model: str = Field(min_length=1, max_length=200, description="The model's name at that endpoint.")
    api_key: str | None = Field(default=None, max_length=4096,
                                description="Stored encrypted, never shown. Left out: the stored one is kept.")
    params: dict[str, Any] = Field(default_factory=dict,
                                   description="Sent with every request, e.g. temperature, max_tokens.")


class RunRequest(BaseModel):
    """``POST /v1/runs``: the agent loop, run by toolrelay."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=64, description="A model defined with PUT /v1/models/{name}.")
    instructions: str | None = Field(default=None, max_length=100_000, description="The system message.")
    input: str | list[dict[str, Any]] = Field(description="A user message, or Chat Completions messages.")
    tools: list[str] = Field(default_factory=list, max_length=128, description="The only tools offered and run.")
    max_iterations: int = Field(default=8, ge=1, le=50, description="Model calls at most.")
    timeout_s: float | None = Field(default=None, gt=0, description="The run's deadline.")
    max_result_chars: int = Field(default=16_000, ge=200, le=1_000_000)
    trace_id: str | None = Field(default=None, min_length=1, max_length=200)
    metadata: dict[str, Any] = Field(default_factory=dict)
    webhook_url: str | None = Field(default=None, max_length=2048)
    wait_s: float = Field(default=0, ge=0, le=60, description="Wait up to this long for the run to end.")


class DecisionRequest(BaseModel):
    """``POST /v1/receipts/{id}/approve`` (``comment``) or ``/reject`` (``reason``)."""

    model_config = ConfigDict(extra="forbid")

    by: str = Field(min_length=1, max_length=200, description="Who decides: a name, an email, an id.")
    comment: str | None = Field(default=None, max_length=4000)
    reason: str | None = Field(default=None, max_length=4000)


class ErrorBody(BaseModel):
    code: str
    message: str
    retryable: bool
    retry_after_ms: int | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class ReceiptBody(BaseModel):
    """A receipt, as every endpoint and webhook returns it."""

    id: str
    status: Literal["pending", "running", "waiting", "success", "failed", "partially_succeeded", "canceled"]
    trace_id: str
    tool: str
    kind: str
    call_id: str | None
    input: Any
    parent_id: str | None
    output: Any
    error: ErrorBody | None
    attempt: int
    max_attempts: int
    idempotency_key: str | None
    metadata: dict[str, Any]
    approval: dict[str, Any] | None = None
    created_at: str
    updated_at: str
    started_at: str | None
    finished_at: str | None
    deadline_at: str


class ReceiptList(BaseModel):
    data: list[ReceiptBody]
    next_cursor: str | None


class EventBody(BaseModel):
    id: int
    at: str
    from_status: str | None
    to_status: str
    attempt: int
    actor: str
    detail: dict[str, Any]


class EventList(BaseModel):
    data: list[EventBody]
    next_cursor: str | None = None


class ResultRequest(BaseModel):
    """``POST /v1/receipts/{id}/result``: exactly one of ``output`` or ``error``."""

    model_config = ConfigDict(extra="forbid")

    output: Any = None
    error: dict[str, Any] | None = None


class ProblemBody(BaseModel):
    type: str
    title: str
    status: int
    detail: str
    errors: list[dict[str, str]] | None = None


PROBLEMS: dict[int | str, dict[str, Any]] = {
    code: {"model": ProblemBody, "content": {"application/problem+json": {}}}
    for code in (400, 401, 403, 404, 409, 413, 422, 429)
}
