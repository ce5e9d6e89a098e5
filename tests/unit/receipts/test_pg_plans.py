"""The hot statements on PostgreSQL find their receipt by primary key, however many receipts are open.

A claim's ``status = 'pending' AND deadline_at > now`` matches the partial index on open receipts'
deadlines; a planner without fresh statistics would walk that whole index (every open receipt) and
filter on the id. Under a backlog that made each claim cost as much as the backlog was long.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from receipts import pg_statements as pg
from receipts.db import Database
from receipts.store.calls import Outcome, ReceiptStore, error
from tests.support.factories import call, spec


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes += plan_nodes(child)
    return nodes


def receipt_scans(db: Database, sql: str, params: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(node type, index name) of every scan of ``receipts`` in the plan PostgreSQL picks for ``sql``."""
    raw = db.engine.raw_connection()
    try:
        with raw.cursor() as cursor:
            cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
            (document,) = cursor.fetchone()
    finally:
        raw.close()
    plan = (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]
    return [(node["Node Type"], node.get("Index Name")) for node in plan_nodes(plan)
            if node.get("Relation Name") == "receipts" and "Scan" in node["Node Type"]]


@pytest.fixture
def backlog(pg_db: Database) -> ReceiptStore:
    store = ReceiptStore(pg_db)
    for _ in range(300):
        store.create(call(spec("echo")))
    return store


def captured(store: ReceiptStore, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    statements: list[tuple[str, dict[str, Any]]] = []
    original = store.db.statement

    def recording(sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        statements.append((sql, dict(params)))
        return original(sql, params)

    monkeypatch.setattr(store.db, "statement", recording)
    return statements


def test_claim_finish_and_retry_use_the_primary_key_under_a_backlog(backlog: ReceiptStore,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    statements = captured(backlog, monkeypatch)
    first, _ = backlog.create(call(spec("echo")))
    claimed = backlog.claim(first.id, lease_s=30, actor="test")
    assert claimed is not None
    backlog.retry_later(first.id, claimed.attempt, error("tool_error", "boom", retryable=True), delay_s=0,
                        published=True, actor="test")
    again = backlog.claim(first.id, lease_s=30, actor="test")
    assert again is not None
    backlog.finish(first.id, again.attempt, Outcome("success", output={}), actor="test")

    by_sql = {sql: params for sql, params in statements}
    for sql in (pg.CLAIM_SQL, pg.RETRY_SQL, pg.FINISH_SQL):
        assert receipt_scans(backlog.db, sql, by_sql[sql]) == [("Index Scan", "receipts_pkey")], sql
