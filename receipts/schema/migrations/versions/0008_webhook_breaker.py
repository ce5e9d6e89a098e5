"""Webhook endpoints isolated: each one's circuit breaker, and the index a fair claim walks.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

``consecutive_failures`` counts failed attempts since the last success; once it reaches
``TOOLRELAY_WEBHOOK_BREAKER_FAILURES`` the endpoint is paused (``paused_until``) for a cool-down that
doubles with each opening in a row (``pauses``); its messages wait meanwhile.

``ix_webhook_messages_pending_lane`` (endpoint_id, next_attempt_at) over pending messages lets a claim
list the endpoints with pending messages and take each one's oldest due ones, without reading the
backlog of an endpoint it cannot take from (at its cap, or paused).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("webhook_endpoints", sa.Column("consecutive_failures", sa.Integer(), nullable=False,
                                                 server_default=sa.text("0")))
    op.add_column("webhook_endpoints", sa.Column("paused_until", sa.DateTime(timezone=True), nullable=True))
    op.add_column("webhook_endpoints", sa.Column("pauses", sa.Integer(), nullable=False, server_default=sa.text("0")))
    op.create_index("ix_webhook_messages_pending_lane", "webhook_messages", ["endpoint_id", "next_attempt_at"],
                    postgresql_where=sa.text("status = 'pending'"))


def downgrade() -> None:
    op.drop_index("ix_webhook_messages_pending_lane", table_name="webhook_messages")
    op.drop_column("webhook_endpoints", "pauses")
    op.drop_column("webhook_endpoints", "paused_until")
    op.drop_column("webhook_endpoints", "consecutive_failures")
