"""Apply the Alembic migrations (SQLite and PostgreSQL alike)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from receipts.db import Database

MIGRATIONS = Path(__file__).with_name("migrations")


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(db: Database, revision: str = "head") -> None:
    """Bring the schema to ``revision``. Safe to run any number of times, from several processes."""
    config = alembic_config(db.engine.url.render_as_string(hide_password=False))
    with db.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Two processes migrating at once would race on DDL: serialize them.
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7420117)")
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
