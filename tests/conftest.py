"""Shared fixtures. Unit tests use a SQLite store in a temporary file; integration tests real services."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from receipts.db import Database
from receipts.migrate import upgrade
from receipts.settings import Settings
from tests.support import services
from tests.support.stack import Stack, running_stack


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[Database]:
    """A migrated SQLite database, fresh for each test."""
    db = Database.from_settings(Settings(database_url=f"sqlite:///{tmp_path / 'test.db'}"))
    upgrade(db)
    yield db
    db.dispose()


@pytest.fixture
def pg_db() -> Iterator[Database]:
    """A migrated PostgreSQL database, fresh for each test (fails, never skips, without PostgreSQL)."""
    url = services.create_database()
    db = Database.from_settings(Settings(database_url=url), pool_size=4)
    upgrade(db)
    yield db
    db.dispose()
    services.drop_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db(request: pytest.FixtureRequest) -> Database:
    """Both backends: the store must behave the same on each."""
    return request.getfixturevalue("sqlite_db" if request.param == "sqlite" else "pg_db")  # type: ignore[no-any-return]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """Gateway, one worker (2 processes) and beat, on PostgreSQL and Redis."""
    with running_stack(tmp_path) as running:
        yield running
