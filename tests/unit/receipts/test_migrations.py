"""The migrations, run on an empty database, build exactly the schema ``receipts/schema/tables.py`` describes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, pool

from receipts.db import Database
from receipts.schema.migrate import sqlalchemy_url, upgrade
from receipts.schema.tables import metadata
from tests.support import services, sql


@pytest.fixture
def empty_db() -> Iterator[Database]:
    """A database with no schema at all, as ``toolrelay migrate`` first finds it."""
    url = services.create_database(migrated=False)
    database = Database(url, pool_size=1, name="toolrelay-test")
    yield database
    database.dispose()
    services.drop_database(url)


def differences(db: Database) -> list[Any]:
    """What alembic's autogenerate would change to make the database match the table definitions."""
    engine = create_engine(sqlalchemy_url(db.conninfo), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            return list(compare_metadata(MigrationContext.configure(conn), metadata))
    finally:
        engine.dispose()


def test_an_empty_database_has_none_of_the_tables(empty_db: Database) -> None:
    assert sql.value(empty_db, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == 0


def test_migrations_match_the_table_definitions(empty_db: Database) -> None:
    upgrade(empty_db)
    assert differences(empty_db) == []


def test_upgrading_again_changes_nothing(empty_db: Database) -> None:
    upgrade(empty_db)
    upgrade(empty_db)
    assert differences(empty_db) == []
