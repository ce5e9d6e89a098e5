"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29

Every table of the first schema, plus a trigger that NOTIFYs on channel
``toolrelay_receipts`` when a receipt reaches a state a long-poll waits for, inside the same
transaction, so waiting gateways wake without polling.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

NOTIFY_FUNCTION = """
CREATE OR REPLACE FUNCTION toolrelay_notify_receipt() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('toolrelay_receipts', NEW.id || ':' || NEW.status);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""

NOTIFY_TRIGGER = """
CREATE TRIGGER receipts_notify AFTER UPDATE OF status ON receipts FOR EACH ROW
WHEN (NEW.status IN ('success', 'failed', 'partially_succeeded', 'canceled', 'waiting'))
EXECUTE FUNCTION toolrelay_notify_receipt();
"""

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "integration_setups",
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("config", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "provider"),
    )
    op.create_table(
        "receipt_events",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("receipt_id", sa.String(length=40), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("from_status", sa.String(length=24), nullable=True),
        sa.Column("to_status", sa.String(length=24), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column(
            "detail", postgresql.JSONB(astext_type=sa.Text()), nullable=False
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("receipt_events", schema=None) as batch_op:
        batch_op.create_index("ix_receipt_events_receipt", ["receipt_id", "id"], unique=False)

    op.create_table(
        "receipts",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("trace_id", sa.String(length=200), nullable=False),
        sa.Column("call_id", sa.String(length=200), nullable=True),
        sa.Column("parent_id", sa.String(length=40), nullable=True),
        sa.Column("tool", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=24), nullable=False),
        sa.Column(
            "input", postgresql.JSONB(astext_type=sa.Text()), nullable=False
        ),
        sa.Column(
            "output", postgresql.JSONB(astext_type=sa.Text()), nullable=True
        ),
        sa.Column(
            "error", postgresql.JSONB(astext_type=sa.Text()), nullable=True
        ),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("request_hash", sa.String(length=64), nullable=True),
        sa.Column(
            "metadata", postgresql.JSONB(astext_type=sa.Text()), nullable=False
        ),
        sa.Column("webhook_url", sa.Text(), nullable=True),
        sa.Column("effect", sa.String(length=8), nullable=False),
        sa.Column("idempotent", sa.Boolean(), nullable=False),
        sa.Column("timeout_s", sa.Float(), nullable=False),
        sa.Column("queue", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deadline_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("available_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "idempotency_key", name="uq_receipts_tenant_idempotency_key"),
    )
    with op.batch_alter_table("receipts", schema=None) as batch_op:
        batch_op.create_index("ix_receipts_parent", ["parent_id"], unique=False)
        batch_op.create_index("ix_receipts_status_available", ["status", "available_at"], unique=False)
        batch_op.create_index("ix_receipts_status_deadline", ["status", "deadline_at"], unique=False)
        batch_op.create_index("ix_receipts_status_lease", ["status", "lease_expires_at"], unique=False)
        batch_op.create_index("ix_receipts_tenant_id_id", ["tenant_id", "id"], unique=False)
        batch_op.create_index("ix_receipts_tenant_trace", ["tenant_id", "trace_id"], unique=False)
        batch_op.create_index("ix_receipts_tool_status", ["tool", "status"], unique=False)

    op.create_table(
        "tenants",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column(
            "webhook_secrets",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "tools",
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column(
            "parameters", postgresql.JSONB(astext_type=sa.Text()), nullable=False
        ),
        sa.Column("effect", sa.String(length=8), nullable=False),
        sa.Column("idempotent", sa.Boolean(), nullable=False),
        sa.Column("timeout_s", sa.Float(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("queue", sa.String(length=100), nullable=False),
        sa.Column(
            "definition", postgresql.JSONB(astext_type=sa.Text()), nullable=False
        ),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "name"),
    )
    op.create_table(
        "webhook_attempts",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("message_id", sa.String(length=40), nullable=False),
        sa.Column("endpoint_id", sa.String(length=40), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("success", sa.Boolean(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("response", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("webhook_attempts", schema=None) as batch_op:
        batch_op.create_index("ix_webhook_attempts_message", ["message_id", "id"], unique=False)

    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("event_types", sa.Text(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.Column(
            "secrets", postgresql.JSONB(astext_type=sa.Text()), nullable=False
        ),
        sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("webhook_endpoints", schema=None) as batch_op:
        batch_op.create_index("ix_webhook_endpoints_tenant", ["tenant_id", "enabled"], unique=False)

    op.create_table(
        "webhook_messages",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("endpoint_id", sa.String(length=40), nullable=True),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("event_type", sa.String(length=40), nullable=False),
        sa.Column("receipt_id", sa.String(length=40), nullable=False),
        sa.Column(
            "payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False
        ),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("webhook_messages", schema=None) as batch_op:
        batch_op.create_index("ix_webhook_messages_due", ["status", "next_attempt_at"], unique=False)
        batch_op.create_index("ix_webhook_messages_endpoint", ["endpoint_id", "id"], unique=False)

    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key_hash"),
    )

    op.execute(NOTIFY_FUNCTION)
    op.execute(NOTIFY_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS receipts_notify ON receipts")
    op.execute("DROP FUNCTION IF EXISTS toolrelay_notify_receipt()")

    op.drop_table("api_keys")
    with op.batch_alter_table("webhook_messages", schema=None) as batch_op:
        batch_op.drop_index("ix_webhook_messages_endpoint")
        batch_op.drop_index("ix_webhook_messages_due")

    op.drop_table("webhook_messages")
    with op.batch_alter_table("webhook_endpoints", schema=None) as batch_op:
        batch_op.drop_index("ix_webhook_endpoints_tenant")

    op.drop_table("webhook_endpoints")
    with op.batch_alter_table("webhook_attempts", schema=None) as batch_op:
        batch_op.drop_index("ix_webhook_attempts_message")

    op.drop_table("webhook_attempts")
    op.drop_table("tools")
    op.drop_table("tenants")
    with op.batch_alter_table("receipts", schema=None) as batch_op:
        batch_op.drop_index("ix_receipts_tool_status")
        batch_op.drop_index("ix_receipts_tenant_trace")
        batch_op.drop_index("ix_receipts_tenant_id_id")
        batch_op.drop_index("ix_receipts_status_lease")
        batch_op.drop_index("ix_receipts_status_deadline")
        batch_op.drop_index("ix_receipts_status_available")
        batch_op.drop_index("ix_receipts_parent")

    op.drop_table("receipts")
    with op.batch_alter_table("receipt_events", schema=None) as batch_op:
        batch_op.drop_index("ix_receipt_events_receipt")

    op.drop_table("receipt_events")
    op.drop_table("integration_setups")
