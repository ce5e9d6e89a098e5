"""Webhook endpoints' circuit breaker: the failure streak, how long the endpoint is paused, how often.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

``consecutive_failures`` counts failed attempts since the last success; once it reaches
``TOOLRELAY_WEBHOOK_BREAKER_FAILURES`` the endpoint is paused (``paused_until``) for a cool-down that
doubles with each opening in a row (``pauses``); its messages wait meanwhile.
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


def downgrade() -> None:
    op.drop_column("webhook_endpoints", "pauses")
    op.drop_column("webhook_endpoints", "paused_until")
    op.drop_column("webhook_endpoints", "consecutive_failures")
