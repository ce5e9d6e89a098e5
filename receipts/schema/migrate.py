"""Apply the Alembic migrations: ``toolrelay migrate``, ``toolrelay dev`` at start, and the tests."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, pool

from receipts.db import Database

MIGRATIONS = Path(__file__).with_name("migrations")
LOCK = 7420117  # the advisory lock that serializes migrations


def sqlalchemy_url(conninfo: str) -> str:
    """The SQLAlchemy URL (psycopg 3 driver) of a libpq URL."""
    return "postgresql+psycopg://" + conninfo.split("://", 1)[1]


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(db: Database, revision: str = "head") -> None:
    """Bring the schema to ``revision``. Safe to run any number of times, from several processes at once."""
    url = sqlalchemy_url(db.conninfo)
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({LOCK})")  # two migrating processes would race on DDL
            config = alembic_config(url)
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    finally:
        engine.dispose()
