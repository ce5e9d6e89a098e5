"""Plain SQL against a test's database, for tests that look at (or change) rows directly."""

from __future__ import annotations

import time
from typing import Any

from receipts.db import Database, Query, Steps, operation
from receipts.db.operations import Fetch


@operation
def _run(sql: str, params: dict[str, Any], fetch: Fetch) -> Steps[Any]:
    return (yield Query(sql, params or None, fetch=fetch))


def one(db: Database, sql: str, **params: Any) -> tuple[Any, ...] | None:
    """The first row of ``sql``."""
    return db.run(_run(sql, params, "one"))  # type: ignore[no-any-return]


def rows(db: Database, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    """Every row of ``sql``."""
    return db.run(_run(sql, params, "all"))  # type: ignore[no-any-return]


def value(db: Database, sql: str, **params: Any) -> Any:
    """The first column of the first row of ``sql`` (None without a row)."""
    row = one(db, sql, **params)
    return None if row is None else row[0]


def execute(db: Database, sql: str, **params: Any) -> int:
    """Run ``sql``; how many rows it touched."""
    return db.run(_run(sql, params, "rowcount"))  # type: ignore[no-any-return]


def wait_until(db: Database, sql: str, timeout: float = 30.0, **params: Any) -> None:
    """Poll until ``sql`` (one boolean) is true, e.g. a time passed by the database's clock; fail after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not value(db, sql, **params):
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout:g} s: {sql}")
        time.sleep(0.05)


def refuse_inserts(db: Database, table: str, condition: str) -> None:
    """Make every INSERT into ``table`` of a row matching ``condition`` (over NEW) fail in PostgreSQL, as a
    full disk would (``DROP TRIGGER refuse_insert ON <table>`` lets them through again)."""
    execute(db, "CREATE OR REPLACE FUNCTION refuse_insert() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$")
    execute(db, f"CREATE TRIGGER refuse_insert BEFORE INSERT ON {table} FOR EACH ROW WHEN ({condition}) "
                "EXECUTE FUNCTION refuse_insert()")


def subscribe_to_everything(db: Database, tenant_id: str) -> None:
    """An endpoint of ``tenant_id`` for every event type, so every announced change writes an outbox row."""
    execute(db, "INSERT INTO webhook_endpoints (id, tenant_id, url, description, event_types, enabled, secrets, "
                "created_at, updated_at) VALUES ('ep_all', %(tenant)s, 'https://example.com/hook', '', '', true, "
                "'[]'::jsonb, now(), now())", tenant=tenant_id)
