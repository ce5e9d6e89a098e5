"""The database schema, as SQLAlchemy Core tables: its one definition, and the source of the migrations.

The store runs SQL written for psycopg (``receipts.store.statements`` and the other operation
modules), not SQLAlchemy; these tables say what the migrations create, and a test checks that the
migrated database and these tables agree. Rows never leave the ``receipts`` package: the
operations turn them into frozen records (``receipts.records``).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

metadata = MetaData()


Json = JSONB()
Timestamp = DateTime(timezone=True)

tenants = Table(
    "tenants",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("name", String(200), nullable=False, unique=True),
    # Default secrets (encrypted) that sign deliveries to a call's own webhook_url.
    Column("webhook_secrets", Json, nullable=False, default=list),
    Column("created_at", Timestamp, nullable=False),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("tenant_id", String(40), ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("prefix", String(16), nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("revoked_at", Timestamp, nullable=True),
    # Scopes (migration 0006): the tools the key may use (NULL: every tool of its tenant), whether it
    # may only read, when it stops working; and when it was last used (to about a minute).
    Column("tools", ARRAY(Text), nullable=True),
    Column("read_only", Boolean, nullable=False, server_default=false()),
    Column("expires_at", Timestamp, nullable=True),
    Column("last_used_at", Timestamp, nullable=True),
    Index("ix_api_keys_tenant", "tenant_id"),
)

# The catalogue. tenant_id "*" marks a tool published by workers for every tenant.
tools = Table(
    "tools",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("description", Text, nullable=False, default=""),
    Column("parameters", Json, nullable=False),
    Column("effect", String(8), nullable=False),
    Column("idempotent", Boolean, nullable=False),
    Column("timeout_s", Float, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("queue", String(100), nullable=False),
    Column("definition", Json, nullable=False, default=dict),
    Column("updated_at", Timestamp, nullable=False),
    # A person approves each call before it runs (migration 0005); unanswered for approval_timeout_s, it expires.
    Column("requires_approval", Boolean, nullable=False, server_default=text("false")),
    Column("approval_timeout_s", Float, nullable=True),
)

receipts = Table(
    "receipts",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("tenant_id", String(40), nullable=False),
    Column("trace_id", String(200), nullable=False),
    Column("call_id", String(200), nullable=True),
    Column("parent_id", String(40), nullable=True),
    Column("tool", String(64), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("status", String(24), nullable=False),
    Column("input", Json, nullable=False),
    Column("output", Json, nullable=True),
    Column("error", Json, nullable=True),
    Column("attempt", Integer, nullable=False, default=0),
    Column("max_attempts", Integer, nullable=False),
    Column("idempotency_key", String(255), nullable=True),
    Column("request_hash", String(64), nullable=True),
    Column("metadata", Json, nullable=False, default=dict),
    Column("webhook_url", Text, nullable=True),
    # The tool's contract, frozen at acceptance so catalogue edits never change a call in flight.
    Column("effect", String(8), nullable=False),
    Column("idempotent", Boolean, nullable=False),
    Column("timeout_s", Float, nullable=False),
    Column("queue", String(100), nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    Column("started_at", Timestamp, nullable=True),
    Column("finished_at", Timestamp, nullable=True),
    Column("deadline_at", Timestamp, nullable=False),
    # Scheduling: a pending receipt may be claimed from available_at on; published_at is when its
    # message was last sent (the sweeper re-publishes when that is old); lease_expires_at bounds a claim.
    Column("available_at", Timestamp, nullable=False),
    Column("published_at", Timestamp, nullable=True),
    Column("lease_expires_at", Timestamp, nullable=True),
    Column("batch_id", String(40), nullable=True),  # migration 0004
    # Approval (migration 0005): {state, requested_at, expires_at, decided_at, by, comment | reason}; a
    # call waiting for one keeps its deadline's length in deadline_s, counted again from the approval.
    Column("approval", Json, nullable=True),
    Column("deadline_s", Float, nullable=True),
    # The call's secret arguments (schema properties marked writeOnly or format password), encrypted
    # with TOOLRELAY_SECRET_KEY; ``input`` holds them masked. Only a worker's claim reads it (migration 0006).
    Column("secret_input", Text, nullable=True),
    # The W3C trace context the call was accepted under (migration 0007): the worker's span of each
    # attempt is its child, so one trace runs from the caller's request to the tool's own requests.
    Column("traceparent", String(64), nullable=True),
    UniqueConstraint("tenant_id", "idempotency_key", name="uq_receipts_tenant_idempotency_key"),
    Index("ix_receipts_tenant_id_id", "tenant_id", "id"),
    Index("ix_receipts_tenant_trace", "tenant_id", "trace_id"),
    Index("ix_receipts_tool_status", "tool", "status"),
    # Partial indexes (migration 0003): only the rows a query can want are in them, so they stay small
    # and a receipt's updates maintain them only while it is open (or has a parent).
    Index("ix_receipts_parent", "parent_id", postgresql_where=text("parent_id IS NOT NULL")),
    Index("ix_receipts_pending_available", "available_at", postgresql_where=text("status = 'pending'")),
    Index("ix_receipts_running_lease", "lease_expires_at", postgresql_where=text("status = 'running'")),
    Index("ix_receipts_open_deadline", "deadline_at", postgresql_where=text("status IN ('pending', 'waiting')")),
    Index("ix_receipts_batch", "batch_id", postgresql_where=text("batch_id IS NOT NULL")),
)

# The tool calls of one agent step, handed over in a vendor's format (POST /v1/batches): one receipt
# per call (receipts.batch_id), and once every one is terminal, the messages to append, rendered in
# that format and kept here (migration 0004).
batches = Table(
    "batches",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("tenant_id", String(40), nullable=False),
    Column("trace_id", String(200), nullable=False),
    Column("format", String(32), nullable=False),
    Column("status", String(16), nullable=False),  # running | completed
    Column("receipt_ids", ARRAY(Text), nullable=False),  # in the calls' order
    Column("idempotency_key", String(255), nullable=True),
    Column("request_hash", String(64), nullable=True),
    Column("max_result_chars", Integer, nullable=False),
    Column("metadata", Json, nullable=False),
    Column("webhook_url", Text, nullable=True),
    Column("messages", Json, nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    Column("completed_at", Timestamp, nullable=True),
    UniqueConstraint("tenant_id", "idempotency_key", name="uq_batches_tenant_idempotency_key"),
    Index("ix_batches_tenant_id", "tenant_id", "id"),
    Index("ix_batches_running", "created_at", postgresql_where=text("status = 'running'")),
)

receipt_events = Table(
    "receipt_events",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("receipt_id", String(40), nullable=False),
    Column("at", Timestamp, nullable=False),
    Column("from_status", String(24), nullable=True),
    Column("to_status", String(24), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("actor", String(200), nullable=False),
    Column("detail", Json, nullable=False, default=dict),
    Index("ix_receipt_events_receipt", "receipt_id", "id"),
)

webhook_endpoints = Table(
    "webhook_endpoints",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("tenant_id", String(40), nullable=False),
    Column("url", Text, nullable=False),
    Column("description", Text, nullable=False, default=""),
    # ",receipt.failed,receipt.succeeded," or "" for every type: matched with LIKE '%,type,%'.
    Column("event_types", Text, nullable=False, default=""),
    Column("enabled", Boolean, nullable=False, default=True),
    Column("disabled_reason", Text, nullable=True),
    Column("secrets", Json, nullable=False, default=list),
    Column("failing_since", Timestamp, nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    # The circuit breaker (migration 0008): failed attempts since the last success; while paused_until
    # is set the endpoint gets no message but one trial once it has passed; pauses in a row (the
    # cool-down doubles with each).
    Column("consecutive_failures", Integer, nullable=False, server_default=text("0")),
    Column("paused_until", Timestamp, nullable=True),
    Column("pauses", Integer, nullable=False, server_default=text("0")),
    Index("ix_webhook_endpoints_tenant", "tenant_id", "enabled"),
)

webhook_messages = Table(
    "webhook_messages",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("tenant_id", String(40), nullable=False),
    Column("endpoint_id", String(40), nullable=True),
    Column("url", Text, nullable=True),
    Column("event_type", String(40), nullable=False),
    Column("receipt_id", String(40), nullable=False),
    Column("payload", Json, nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("next_attempt_at", Timestamp, nullable=True),
    Column("locked_until", Timestamp, nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    Column("traceparent", String(64), nullable=True),  # the receipt's, so a delivery joins its trace (0007)
    Index("ix_webhook_messages_due", "status", "next_attempt_at"),
    Index("ix_webhook_messages_endpoint", "endpoint_id", "id"),
    Index("ix_webhook_messages_endpoint_created", "endpoint_id", "created_at"),  # migration 0002
    Index("ix_webhook_messages_receipt", "receipt_id"),  # migration 0002
    # A claim's loose index scan over the endpoints with pending messages, then each one's oldest due
    # ones (migration 0008).
    Index("ix_webhook_messages_pending_lane", "endpoint_id", "next_attempt_at",
          postgresql_where=text("status = 'pending'")),
)

webhook_attempts = Table(
    "webhook_attempts",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("message_id", String(40), nullable=False),
    Column("endpoint_id", String(40), nullable=True),
    Column("at", Timestamp, nullable=False),
    Column("success", Boolean, nullable=False),
    Column("status_code", Integer, nullable=True),
    Column("latency_ms", Float, nullable=True),
    Column("response", Text, nullable=True),
    Column("error", Text, nullable=True),
    Index("ix_webhook_attempts_message", "message_id", "id"),
)

integration_setups = Table(
    "integration_setups",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("provider", String(64), primary_key=True),
    Column("config", Text, nullable=False),  # encrypted JSON
    Column("updated_at", Timestamp, nullable=False),
)

# Models a tenant's runs call: any OpenAI-compatible Chat Completions endpoint (migration 0005). The
# API key is encrypted with TOOLRELAY_SECRET_KEY and never shown.
models = Table(
    "models",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("base_url", Text, nullable=False),
    Column("model", String(200), nullable=False),
    Column("api_key", Text, nullable=True),  # encrypted
    Column("params", Json, nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
)

# Agent runs: the loop (model, tools, model...) as a durable service, leased and swept like a receipt
# (migration 0005). Each step is a row of run_steps, written before the next begins.
runs = Table(
    "runs",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("tenant_id", String(40), nullable=False),
    Column("trace_id", String(200), nullable=False),
    Column("model", String(64), nullable=False),
    Column("status", String(24), nullable=False),
    Column("instructions", Text, nullable=True),
    Column("input", Json, nullable=False),  # the chat messages the run starts from
    Column("tools", ARRAY(Text), nullable=False),
    Column("max_iterations", Integer, nullable=False),
    Column("max_result_chars", Integer, nullable=False),
    Column("metadata", Json, nullable=False),
    Column("webhook_url", Text, nullable=True),
    Column("idempotency_key", String(255), nullable=True),
    Column("request_hash", String(64), nullable=True),
    Column("output", Text, nullable=True),
    Column("error", Json, nullable=True),
    Column("iterations", Integer, nullable=False),
    Column("prompt_tokens", BigInteger, nullable=False),
    Column("completion_tokens", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),  # the fencing token of whoever advances the run
    Column("waiting_batch_id", String(40), nullable=True),  # the tool step it waits for
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    Column("finished_at", Timestamp, nullable=True),
    Column("deadline_at", Timestamp, nullable=False),
    Column("available_at", Timestamp, nullable=False),
    Column("published_at", Timestamp, nullable=True),
    Column("lease_expires_at", Timestamp, nullable=True),
    UniqueConstraint("tenant_id", "idempotency_key", name="uq_runs_tenant_idempotency_key"),
    Index("ix_runs_tenant_id", "tenant_id", "id"),
    Index("ix_runs_tenant_trace", "tenant_id", "trace_id"),
    Index("ix_runs_open_deadline", "deadline_at",
          postgresql_where=text("status IN ('pending', 'running', 'waiting')")),
    Index("ix_runs_pending_available", "available_at", postgresql_where=text("status = 'pending'")),
    Index("ix_runs_leased", "lease_expires_at", postgresql_where=text("lease_expires_at IS NOT NULL")),
)

run_steps = Table(
    "run_steps",
    metadata,
    Column("run_id", String(40), primary_key=True),
    Column("index", Integer, primary_key=True),
    Column("kind", String(8), nullable=False),  # model | tools
    Column("data", Json, nullable=False),
    Column("created_at", Timestamp, nullable=False),
)
