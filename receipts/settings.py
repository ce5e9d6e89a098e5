"""Settings, read from ``TOOLRELAY_*`` environment variables by pydantic-settings.

There is no module-level settings object: every process builds one with :func:`load_settings` and
passes it down to the factories (``create_app``, ``make_celery``, ``Database.from_settings``).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

CommaList = Annotated[list[str], NoDecode]


def _split(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class Settings(BaseSettings):
    """Every knob of a toolrelay process."""

    model_config = SettingsConfigDict(env_prefix="TOOLRELAY_", extra="ignore")

    # PostgreSQL, e.g. postgresql://toolrelay:secret@db:5432/toolrelay. Empty: processes that need
    # the database refuse to start; `toolrelay dev` runs an embedded PostgreSQL instead.
    database_url: str = ""
    broker_url: str = "memory://localhost/"
    # Prefix for every Redis key the broker uses, so installations (or test runs) can share a Redis.
    broker_key_prefix: str = ""
    # On a plain redis:// broker the gateway publishes from its event loop and workers use toolrelay's
    # Redis transport (gateway/publisher.py, workers/redis_transport.py: kombu's messages and
    # bookkeeping, cheaper); false: kombu's own publishing and transport for both.
    redis_fast_path: bool = True
    tool_modules: CommaList = Field(default_factory=list)
    secret_key: str = ""

    # Execution defaults (DESIGN.md, guarantee 3 and 5).
    default_max_attempts: int = 3
    retry_initial_s: float = 1.0
    retry_factor: float = 2.0
    retry_max_s: float = 100.0
    call_deadline_s: float = 3600.0
    function_deadline_s: float = 24 * 3600.0
    function_deadline_max_s: float = 31 * 24 * 3600.0
    lease_grace_s: float = 15.0
    approval_timeout_s: float = 24 * 3600.0  # how long a call waits for a person's approval by default

    # Agent runs: the longest one model call may take, and a run's deadline when the request sets none.
    model_timeout_s: float = 120.0
    run_deadline_s: float = 3600.0
    run_deadline_max_s: float = 7 * 24 * 3600.0

    # Sweeper: how often it runs and when a pending receipt's message is presumed lost.
    sweep_interval_s: float = 2.0
    republish_after_s: float = 30.0
    sweep_batch: int = 500

    # Gateway.
    max_body_bytes: int = 1024 * 1024
    batch_max_calls: int = 64  # tool calls in one POST /v1/batches
    long_poll_max_s: float = 60.0
    # How long a gateway process trusts an API key lookup: a revoked key stops working within this
    # time (an expiring one exactly at its expiry). Each key costs one lookup per process per period.
    auth_cache_s: float = 5.0
    catalogue_cache_s: float = 2.0

    # Rate limits per API key, a token bucket shared by every gateway (0: no limit): requests per second
    # on average, and how many may come at once (0: the rate, rounded up). The bucket lives in Redis
    # (rate_limit_redis_url, or the broker's when that is Redis), else in each gateway process.
    rate_limit_per_s: float = 0.0
    rate_limit_burst: int = 0
    rate_limit_redis_url: str = ""

    # Outbound HTTP (api_call tools and webhooks): CIDRs that may be reached despite the SSRF guard.
    outbound_allow_cidrs: CommaList = Field(default_factory=list)

    # Webhooks.
    webhook_retry_schedule: CommaList = Field(
        default_factory=lambda: ["0", "5", "300", "1800", "7200", "18000", "36000", "36000"]
    )
    webhook_timeout_s: float = 15.0
    webhook_secret_grace_s: float = 24 * 3600.0
    webhook_disable_after_s: float = 5 * 24 * 3600.0
    webhook_batch: int = 200
    webhook_concurrency: int = 32
    # Deliveries in flight to one endpoint (or one call's webhook_url) per dispatcher, so a slow or
    # hanging endpoint holds only its share; 0: a quarter of webhook_concurrency (at least 1).
    webhook_endpoint_concurrency: int = 0
    # The breaker: after this many failed attempts in a row an endpoint is paused for the cool-down,
    # doubled at each opening in a row up to the maximum, then gets one trial; 0 turns it off. High
    # enough that a few messages run their own (already spaced) retry schedules; it is for endpoints
    # with many messages failing at once.
    webhook_breaker_failures: int = 20
    webhook_breaker_cooldown_s: float = 30.0
    webhook_breaker_max_s: float = 3600.0
    # How often beat (or the embedded mode) pumps the dispatcher; nudges after transitions come sooner.
    webhook_poll_s: float = 1.0

    # Integrations: base URLs are settings so tests can point them at local servers.
    wikipedia_base_url: str = "https://en.wikipedia.org/w/api.php"
    weather_base_url: str = "https://api.open-meteo.com/v1/forecast"
    http_max_bytes: int = 1024 * 1024
    # Outbound requests of api_call tools and integrations: per-request timeout and redirect hops.
    outbound_timeout_s: float = 20.0
    outbound_max_redirects: int = 5
    # System tools: how deep a tree of calls made with tool_calls_create may grow.
    max_call_depth: int = 8

    # Operating it: log lines as text or one JSON object each; the port a worker serves /metrics on
    # (0: none; the gateway serves its own on its HTTP port). Tracing is the OTEL_* variables' business.
    log_format: Literal["text", "json"] = "text"
    log_level: str = "INFO"
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"

    @field_validator("tool_modules", "outbound_allow_cidrs", "webhook_retry_schedule", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return _split(value)

    @property
    def rate_limit_capacity(self) -> int:
        """The token bucket's size: the burst, or the rate rounded up (at least one request)."""
        return self.rate_limit_burst or max(1, math.ceil(self.rate_limit_per_s))

    @property
    def endpoint_concurrency(self) -> int:
        """Deliveries in flight to one endpoint per dispatcher (``webhook_endpoint_concurrency`` resolved)."""
        if self.webhook_endpoint_concurrency > 0:
            return self.webhook_endpoint_concurrency
        return max(1, self.webhook_concurrency // 4)

    @property
    def retry_schedule_s(self) -> list[float]:
        return [float(part) for part in self.webhook_retry_schedule]


def load_settings(**overrides: object) -> Settings:
    """Build settings from the environment, with explicit overrides taking precedence."""
    return Settings(**overrides)  # type: ignore[arg-type]
