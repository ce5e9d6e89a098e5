"""Trace context: the W3C ``traceparent`` a call was accepted under, on its receipt and its webhook messages.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("receipts", sa.Column("traceparent", sa.String(length=64), nullable=True))
    op.add_column("webhook_messages", sa.Column("traceparent", sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column("webhook_messages", "traceparent")
    op.drop_column("receipts", "traceparent")
