"""Real PostgreSQL and Redis for tests: a fresh database and an isolated Redis key prefix per use.

A fresh database is a copy of a migrated template (``CREATE DATABASE ... TEMPLATE``), made once per
test run, so each test starts on the real schema in a few milliseconds instead of migrating again.
These never skip: a missing service is a failure, in CI and locally alike.
"""

from __future__ import annotations

import os
import threading
import uuid

import psycopg
import redis

PG_ADMIN = os.environ.get("TOOLRELAY_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("TOOLRELAY_TEST_REDIS", "redis://127.0.0.1:6379/0")

_template: str | None = None
_template_lock = threading.Lock()


def _url(name: str) -> str:
    return f"{PG_ADMIN.rsplit('/', 1)[0]}/{name}"


def _admin() -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5)


def migrated_template() -> str:
    """The name of this run's migrated template database (created on first use, dropped at exit)."""
    global _template
    with _template_lock:
        if _template is None:
            from receipts.db import Database
            from receipts.schema.migrate import upgrade

            name = f"toolrelay_tpl_{uuid.uuid4().hex[:10]}"
            with _admin() as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            db = Database(_url(name), pool_size=1)
            upgrade(db)
            db.dispose()
            import atexit

            atexit.register(drop_database, _url(name))
            _template = name
        return _template


def create_database(*, migrated: bool = True) -> str:
    """A new database (migrated, or empty); returns its URL."""
    name = f"toolrelay_t_{uuid.uuid4().hex[:12]}"
    template = f' TEMPLATE "{migrated_template()}"' if migrated else ""
    with _admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"{template}')
    return _url(name)


def database_name(url: str) -> str:
    """The name of the database a URL of :func:`create_database` points at."""
    return url.rsplit("/", 1)[1].split("?", 1)[0]


def drop_database(url: str) -> None:
    name = database_name(url)
    with _admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def redis_prefix() -> str:
    """A key prefix no other test run uses, so runs can share one Redis."""
    return f"trt{uuid.uuid4().hex[:10]}:"


def clear_redis_prefix(prefix: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()
