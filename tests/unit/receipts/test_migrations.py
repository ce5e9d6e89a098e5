"""The migrations build exactly the schema ``receipts/tables.py`` describes, on both backends."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from receipts.db import Database
from receipts.schema.migrate import upgrade
from receipts.schema.tables import metadata


def test_migrations_match_the_table_definitions(any_db: Database) -> None:
    with any_db.engine.connect() as conn:
        differences = compare_metadata(MigrationContext.configure(conn), metadata)
    assert differences == []


def test_upgrading_again_changes_nothing(any_db: Database) -> None:
    upgrade(any_db)
    with any_db.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
