"""Batches: the tool calls of one agent step, and the receipts that belong to one.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("receipts", sa.Column("batch_id", sa.String(length=40), nullable=True))
    op.create_index("ix_receipts_batch", "receipts", ["batch_id"], postgresql_where=sa.text("batch_id IS NOT NULL"))
    op.create_table(
        "batches",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("trace_id", sa.String(length=200), nullable=False),
        sa.Column("format", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("receipt_ids", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("request_hash", sa.String(length=64), nullable=True),
        sa.Column("max_result_chars", sa.Integer(), nullable=False),
        sa.Column("metadata", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("webhook_url", sa.Text(), nullable=True),
        sa.Column("messages", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "idempotency_key", name="uq_batches_tenant_idempotency_key"),
    )
    op.create_index("ix_batches_tenant_id", "batches", ["tenant_id", "id"])
    op.create_index("ix_batches_running", "batches", ["created_at"], postgresql_where=sa.text("status = 'running'"))


def downgrade() -> None:
    op.drop_index("ix_batches_running", table_name="batches")
    op.drop_index("ix_batches_tenant_id", table_name="batches")
    op.drop_table("batches")
    op.drop_index("ix_receipts_batch", table_name="receipts")
    op.drop_column("receipts", "batch_id")
