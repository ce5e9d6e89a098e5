"""PostgreSQL unreachable: a request that needs it answers 503 with Retry-After and changes nothing;
the gateway serves again, by itself, as soon as the database is back (DESIGN.md, guarantee 8)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from receipts.db import Database
from tests.support import services, sql
from tests.unit.gateway.conftest import Gateway, assert_problem


def end_sessions(admin: psycopg.Connection[Any], name: str) -> None:
    """End every session on the database ``name``, as a server restart would, and wait until they have ended."""
    ended = admin.execute("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = %s",
                          [name]).fetchall()
    assert ended and all(done for (done,) in ended)


@contextmanager
def refusing_connections(db: Database) -> Iterator[None]:
    """Until the block ends, ``db``'s database refuses new connections and every session it had is ended.

    What a gateway sees of a database server that went away: the server closes its pooled
    connections, and connecting again fails at once.
    """
    name = db.url.rsplit("/", 1)[1]
    with psycopg.connect(services.PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
        try:
            end_sessions(admin, name)
            yield
        finally:
            admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')


def assert_unavailable(response: Any) -> None:
    body = assert_problem(response, 503)
    retry_after = response.headers["retry-after"]
    assert retry_after.isdigit() and int(retry_after) > 0
    assert "database" in body["detail"]


def test_without_the_database_reads_and_writes_are_503_and_the_first_request_after_it_succeeds(
        gateway: Gateway) -> None:
    first = gateway.post_call({"tool": "echo", "arguments": {"n": 1}})  # the key and the tool are now cached
    assert first.status_code == 202, first.text
    receipt_id = first.json()["id"]
    # Each request waits for a connection before it answers 503, so the outage outlasts that wait
    # three times over: the pool's retries must not have backed off past the first request after it.
    with refusing_connections(gateway.db):
        assert_unavailable(gateway.post_call({"tool": "echo", "arguments": {"n": 2}}))
        assert_unavailable(gateway.client.get(f"/v1/receipts/{receipt_id}", headers=gateway.headers()))
        # A key the gateway has not seen yet cannot be checked: unavailable, not unauthorized.
        assert_unavailable(gateway.client.get("/v1/receipts", headers=gateway.headers(gateway.other_key)))

    after = gateway.post_call({"tool": "echo", "arguments": {"n": 3}})
    assert after.status_code == 202, after.text
    read = gateway.client.get(f"/v1/receipts/{receipt_id}", headers=gateway.headers())
    assert read.status_code == 200 and read.json()["input"] == {"n": 1}
    assert gateway.client.get("/v1/receipts", headers=gateway.headers(gateway.other_key)).json()["data"] == []
    # Nothing of the refused call was stored or published.
    assert sql.rows(gateway.db, "SELECT input FROM receipts ORDER BY id") == [({"n": 1},), ({"n": 3},)]
    assert [message.args[0] for message in gateway.executes()] == [receipt_id, after.json()["id"]]


def test_after_postgresql_ended_every_session_the_next_request_is_served_at_once(gateway: Gateway) -> None:
    assert gateway.post_call({"tool": "echo", "arguments": {"n": 1}}).status_code == 202
    with psycopg.connect(services.PG_ADMIN, autocommit=True) as admin:
        end_sessions(admin, gateway.db.url.rsplit("/", 1)[1])
    started = time.monotonic()
    after = gateway.post_call({"tool": "echo", "arguments": {"n": 2}})
    assert after.status_code == 202, after.text
    assert sql.value(gateway.db, "SELECT count(*) FROM receipts") == 2  # the blocking pool reconnects too
    assert time.monotonic() - started < 5  # a closed connection is replaced, not waited on until the timeout
