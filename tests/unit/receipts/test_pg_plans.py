"""The hot statements find their receipt by primary key, however many receipts are open.

A claim's ``status = 'pending' AND deadline_at > now`` matches the partial index on open receipts'
deadlines; a planner without fresh statistics would walk that whole index (every open receipt) and
filter on the id. Under a backlog that made each claim cost as much as the backlog was long.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from receipts.db import Database, Op, Query, Steps, operation
from receipts.store import calls
from receipts.store import statements as statements_sql
from receipts.store.calls import Result, error
from tests.support.factories import call, spec

Recorded = list[tuple[str, dict[str, Any]]]


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes += plan_nodes(child)
    return nodes


@operation
def _statement(query: Query) -> Steps[Any]:
    return (yield query)


def receipt_scans(db: Database, sql: str, params: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(node type, index name) of every scan of ``receipts`` in the plan PostgreSQL picks for ``sql``."""
    (document,) = db.run(_statement(Query("EXPLAIN (FORMAT JSON) " + sql, params)))
    plan = (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]
    return [(node["Node Type"], node.get("Index Name")) for node in plan_nodes(plan)
            if node.get("Relation Name") == "receipts" and "Scan" in node["Node Type"]]


@pytest.fixture
def backlog(db: Database) -> Database:
    for _ in range(300):
        db.run(calls.create(call(spec("echo"))))
    return db


def recording(db: Database, op: Op[Any], statements: Recorded) -> Any:
    """Run ``op`` one statement at a time, remembering each statement and its parameters."""
    steps, result = op.steps, None
    while True:
        try:
            step = steps.send(result)
        except StopIteration as done:
            return done.value
        if isinstance(step, Query):
            statements.append((step.sql, dict(step.params or {})))  # type: ignore[arg-type]
            result = db.run(_statement(step))
        else:
            result = None


def test_claim_finish_and_retry_use_the_primary_key_under_a_backlog(backlog: Database) -> None:
    statements: Recorded = []
    first, _ = backlog.run(calls.create(call(spec("echo"))))
    claimed = recording(backlog, calls.claim(first.id, lease_s=30, actor="test"), statements)
    assert claimed is not None
    recording(backlog, calls.retry_later(first.id, claimed.receipt.attempt, error("tool_error", "boom", retryable=True),
                                         delay_s=0, published=True, actor="test"), statements)
    again = recording(backlog, calls.claim(first.id, lease_s=30, actor="test"), statements)
    assert again is not None
    recording(backlog, calls.finish(first.id, again.receipt.attempt, Result("success", output={}), actor="test"),
              statements)

    by_sql = {sql: params for sql, params in statements}
    for sql in (statements_sql.CLAIM_SQL, statements_sql.RETRY_SQL, statements_sql.FINISH_SQL):
        assert receipt_scans(backlog, sql, by_sql[sql]) == [("Index Scan", "receipts_pkey")], sql


@operation
def _prepared_statements() -> Steps[list[str]]:
    rows = yield Query("SELECT statement FROM pg_prepared_statements", fetch="all")
    return [row[0] for row in rows]


def test_reads_of_sets_of_receipts_are_never_kept_prepared(db: Database) -> None:
    """A prepared statement's generic plan is made for the table as it was: a read of a set of ids
    prepared on a small table scans the whole table as it grows, until something analyzes it."""
    single = Database(db.url, pool_size=1, name="toolrelay-test-plans")
    try:
        first, _ = single.run(calls.create(call(spec("echo"))))
        control = Query("SELECT id FROM receipts WHERE id = %(id)s", {"id": first.id})
        for _ in range(12):  # psycopg prepares a statement from its fifth run on a connection
            assert single.run(calls.get_many([(None, first.id)])) == [first]
            assert single.run(_statement(control)) == (first.id,)
        prepared = single.run(_prepared_statements())
        assert any("SELECT id FROM receipts WHERE id =" in text for text in prepared)  # any other: kept
        assert not any("FROM receipts WHERE id = ANY" in text for text in prepared)  # get_many: planned each time
    finally:
        single.dispose()
