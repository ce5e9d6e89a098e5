"""Engines and transactions. Built from settings by a factory; nothing is created at import time."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.dialects import postgresql, sqlite

from receipts.settings import Settings


def utcnow() -> datetime:
    """The current time, timezone-aware UTC (the only clock the store uses)."""
    return datetime.now(UTC)


def dialect_insert(conn: Connection) -> Any:
    """The backend's INSERT construct, which knows ON CONFLICT (PostgreSQL and SQLite both do)."""
    return postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert


def make_engine(url: str, *, pool_size: int = 10) -> Engine:
    """An engine for ``url`` with the settings each backend needs.

    SQLite runs in WAL mode with a busy timeout, and every transaction starts with ``BEGIN
    IMMEDIATE`` so two writers queue for the lock instead of failing on upgrade.
    """
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        _tune_sqlite(engine)
        return engine
    return create_engine(
        url, pool_size=pool_size, max_overflow=pool_size * 2, pool_pre_ping=True, pool_recycle=1800
    )


def _tune_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # let SQLAlchemy's begin() below issue BEGIN
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


class Database:
    """An engine plus the one way to open a transaction."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def from_settings(cls, settings: Settings, *, pool_size: int = 10) -> Database:
        url = settings.database_url
        if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
            Path(url.removeprefix("sqlite:///")).expanduser().resolve().parent.mkdir(
                parents=True, exist_ok=True
            )
        return cls(make_engine(url, pool_size=pool_size))

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A connection inside a transaction: committed on exit, rolled back on error."""
        with self.engine.begin() as conn:
            yield conn

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()
