"""Partial indexes for the sweeper's scans and child lookups.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29

The sweeper looks only at open receipts (pending by available_at, running by lease, pending or
waiting by deadline) and child lookups only at receipts with a parent. Indexes restricted to those
rows stay small however many finished receipts accumulate, and a receipt's status changes stop
maintaining them once it is finished. The index on (tool, status) stays for per-tool queries.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

PARTIAL = {
    "ix_receipts_parent": (["parent_id"], "parent_id IS NOT NULL"),
    "ix_receipts_pending_available": (["available_at"], "status = 'pending'"),
    "ix_receipts_running_lease": (["lease_expires_at"], "status = 'running'"),
    "ix_receipts_open_deadline": (["deadline_at"], "status IN ('pending', 'waiting')"),
}
REPLACED = {
    "ix_receipts_parent": ["parent_id"],
    "ix_receipts_status_available": ["status", "available_at"],
    "ix_receipts_status_lease": ["status", "lease_expires_at"],
    "ix_receipts_status_deadline": ["status", "deadline_at"],
}


def upgrade() -> None:
    for name in REPLACED:
        op.drop_index(name, table_name="receipts")
    for name, (columns, where) in PARTIAL.items():
        op.create_index(name, "receipts", columns, postgresql_where=sa.text(where))


def downgrade() -> None:
    for name in PARTIAL:
        op.drop_index(name, table_name="receipts")
    for name, columns in REPLACED.items():
        op.create_index(name, "receipts", columns)
