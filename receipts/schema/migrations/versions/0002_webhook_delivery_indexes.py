"""webhook delivery indexes

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

The deliveries log lists an endpoint's messages newest first (``endpoint_id, created_at``) and a
receipt's messages (``receipt_id``); recovery selects an endpoint's failed messages since a time.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("webhook_messages", schema=None) as batch_op:
        batch_op.create_index("ix_webhook_messages_endpoint_created", ["endpoint_id", "created_at"], unique=False)
        batch_op.create_index("ix_webhook_messages_receipt", ["receipt_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("webhook_messages", schema=None) as batch_op:
        batch_op.drop_index("ix_webhook_messages_receipt")
        batch_op.drop_index("ix_webhook_messages_endpoint_created")
