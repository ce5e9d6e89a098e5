"""Alembic environment: runs migrations on the connection or URL handed in by ``receipts.schema.migrate``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, engine_from_config, pool

from receipts.schema.tables import metadata

config = context.config


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
        return
    engine = engine_from_config(
        config.get_section(config.config_ini_section) or {}, prefix="sqlalchemy.", poolclass=pool.NullPool
    )
    with engine.connect() as conn:
        _run_on(conn)


def _run_on(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=metadata, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


run()
