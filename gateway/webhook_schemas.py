"""Request and response bodies of the webhook endpoints, deliveries and default-secret API (pydantic, at the edge)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class EndpointCreate(BaseModel):
    """``POST /v1/webhook-endpoints``."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=2048, description="http(s) URL receiving the POSTs.")
    event_types: list[str] = Field(default_factory=list, max_length=20,
                                   description="Event types to receive; empty for every type.")
    description: str = Field(default="", max_length=500)
    enabled: bool = True


class EndpointUpdate(BaseModel):
    """``PATCH /v1/webhook-endpoints/{id}``: only the fields given change."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(default=None, min_length=1, max_length=2048)
    event_types: list[str] | None = Field(default=None, max_length=20)
    description: str | None = Field(default=None, max_length=500)
    enabled: bool | None = None


class EndpointBody(BaseModel):
    id: str
    url: str
    description: str
    event_types: list[str]
    enabled: bool
    disabled_reason: str | None
    failing_since: str | None
    consecutive_failures: int = Field(description="Failed attempts since the last success.")
    paused_until: str | None = Field(description="Set while the breaker holds the endpoint's messages back (after "
                                                 "repeated failures); past it, one trial message is sent.")
    created_at: str
    updated_at: str


class EndpointCreated(EndpointBody):
    secret: str = Field(description="The signing secret (whsec_...). Shown only here and on rotation.")


class EndpointList(BaseModel):
    data: list[EndpointBody]
    next_cursor: str | None


class SecretRotated(BaseModel):
    endpoint_id: str
    secret: str = Field(description="The new signing secret (whsec_...). Shown only here.")
    previous_secret_expires_at: str = Field(description="Until then deliveries carry both signatures.")


class AttemptBody(BaseModel):
    id: int
    at: str
    success: bool
    status_code: int | None
    latency_ms: float | None
    response: str | None = Field(description="The first KiB of the response body.")
    error: str | None


class DeliveryBody(BaseModel):
    id: str = Field(description="The webhook-id header of every attempt.")
    endpoint_id: str | None
    url: str | None = Field(description="The call's own webhook_url, for deliveries without an endpoint.")
    event_type: str
    receipt_id: str
    status: str = Field(description="pending, delivered or failed.")
    attempt_count: int
    next_attempt_at: str | None
    created_at: str
    updated_at: str
    attempts: list[AttemptBody]


class DeliveryList(BaseModel):
    data: list[DeliveryBody]
    next_cursor: str | None


class RecoverRequest(BaseModel):
    """``POST /v1/webhook-endpoints/{id}/recover``: resend the failed messages created in [since, until)."""

    model_config = ConfigDict(extra="forbid")

    since: datetime
    until: datetime | None = None


class RecoverResult(BaseModel):
    recovered: int


class SecretInfoBody(BaseModel):
    created_at: str
    expires_at: str | None


class DefaultSecretBody(BaseModel):
    """The tenant's default secret, which signs deliveries to a call's own ``webhook_url``."""

    configured: bool
    secrets: list[SecretInfoBody]


class DefaultSecretCreated(BaseModel):
    secret: str = Field(description="The signing secret (whsec_...). Shown only here.")
    created_at: str
    previous_secret_expires_at: str | None = None
