"""Shared fixtures: a fresh migrated PostgreSQL database per test, and a real deployment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from receipts.db import Database
from tests.support import services
from tests.support.stack import Stack, running_stack


@pytest.fixture
def db() -> Iterator[Database]:
    """A migrated PostgreSQL database, fresh for each test (fails, never skips, without PostgreSQL)."""
    url = services.create_database()
    database = Database(url, pool_size=4, name="toolrelay-test")
    yield database
    database.dispose()
    services.drop_database(url)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """Gateway, one worker (2 processes) and beat, on PostgreSQL and Redis."""
    with running_stack(tmp_path) as running:
        yield running
