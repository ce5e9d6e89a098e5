"""Agent runs, the models they call, and approvals of tools that need a person's yes.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

JSONB = postgresql.JSONB(astext_type=sa.Text())
TIME = sa.DateTime(timezone=True)
OPEN = "status IN ('pending', 'running', 'waiting')"


def upgrade() -> None:
    op.add_column("tools", sa.Column("requires_approval", sa.Boolean(), server_default=sa.text("false"),
                                     nullable=False))
    op.add_column("tools", sa.Column("approval_timeout_s", sa.Float(), nullable=True))
    op.add_column("receipts", sa.Column("approval", JSONB, nullable=True))
    op.add_column("receipts", sa.Column("deadline_s", sa.Float(), nullable=True))
    op.create_table(
        "models",
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("base_url", sa.Text(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("api_key", sa.Text(), nullable=True),
        sa.Column("params", JSONB, nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "name"),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=40), nullable=False),
        sa.Column("trace_id", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=24), nullable=False),
        sa.Column("instructions", sa.Text(), nullable=True),
        sa.Column("input", JSONB, nullable=False),
        sa.Column("tools", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("max_iterations", sa.Integer(), nullable=False),
        sa.Column("max_result_chars", sa.Integer(), nullable=False),
        sa.Column("metadata", JSONB, nullable=False),
        sa.Column("webhook_url", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("request_hash", sa.String(length=64), nullable=True),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column("error", JSONB, nullable=True),
        sa.Column("iterations", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("waiting_batch_id", sa.String(length=40), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.Column("finished_at", TIME, nullable=True),
        sa.Column("deadline_at", TIME, nullable=False),
        sa.Column("available_at", TIME, nullable=False),
        sa.Column("published_at", TIME, nullable=True),
        sa.Column("lease_expires_at", TIME, nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "idempotency_key", name="uq_runs_tenant_idempotency_key"),
    )
    op.create_index("ix_runs_tenant_id", "runs", ["tenant_id", "id"])
    op.create_index("ix_runs_tenant_trace", "runs", ["tenant_id", "trace_id"])
    op.create_index("ix_runs_open_deadline", "runs", ["deadline_at"], postgresql_where=sa.text(OPEN))
    op.create_index("ix_runs_pending_available", "runs", ["available_at"],
                    postgresql_where=sa.text("status = 'pending'"))
    op.create_index("ix_runs_leased", "runs", ["lease_expires_at"],
                    postgresql_where=sa.text("lease_expires_at IS NOT NULL"))
    op.create_table(
        "run_steps",
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("data", JSONB, nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "index"),
    )


def downgrade() -> None:
    op.drop_table("run_steps")
    for name in ("ix_runs_leased", "ix_runs_pending_available", "ix_runs_open_deadline", "ix_runs_tenant_trace",
                 "ix_runs_tenant_id"):
        op.drop_index(name, table_name="runs")
    op.drop_table("runs")
    op.drop_table("models")
    op.drop_column("receipts", "deadline_s")
    op.drop_column("receipts", "approval")
    op.drop_column("tools", "approval_timeout_s")
    op.drop_column("tools", "requires_approval")
