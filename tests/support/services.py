"""Real PostgreSQL and Redis for tests: a fresh database and an isolated Redis key prefix per use.

These never skip: a missing service is a failure, in CI and locally alike.
"""

from __future__ import annotations

import os
import uuid

import psycopg
import redis

PG_ADMIN = os.environ.get("TOOLRELAY_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("TOOLRELAY_TEST_REDIS", "redis://127.0.0.1:6379/0")


def create_database() -> str:
    """A new, empty PostgreSQL database; returns its SQLAlchemy URL."""
    name = f"toolrelay_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    return f"{base}/{name}"


def drop_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as conn:
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
