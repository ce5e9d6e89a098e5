"""API keys with scopes, expiry and last use; the encrypted secret arguments of a call.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("tools", postgresql.ARRAY(sa.Text()), nullable=True))
    op.add_column("api_keys", sa.Column("read_only", sa.Boolean(), server_default=sa.false(), nullable=False))
    op.add_column("api_keys", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("api_keys", sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_api_keys_tenant", "api_keys", ["tenant_id"])
    op.add_column("receipts", sa.Column("secret_input", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("receipts", "secret_input")
    op.drop_index("ix_api_keys_tenant", table_name="api_keys")
    op.drop_column("api_keys", "last_used_at")
    op.drop_column("api_keys", "expires_at")
    op.drop_column("api_keys", "read_only")
    op.drop_column("api_keys", "tools")
