"""Statements' placeholders, converted once to PostgreSQL's $n and run through raw-query cursors."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from receipts.db import Database, Query, Steps, operation
from receipts.db.placeholders import compile_statement


@operation
def one(sql: str, params: Any = None) -> Steps[Any]:
    return (yield Query(sql, params))


def test_a_name_used_twice_is_one_parameter_and_double_percent_is_a_literal() -> None:
    statement = compile_statement("SELECT %(a)s, %(b)s, %(a)s, 'x%%y' LIKE '%%'")
    assert statement.text == b"SELECT $1, $2, $1, 'x%y' LIKE '%'"
    assert statement.parameters({"b": 2, "a": 1, "unused": 3}) == [1, 2]
    assert compile_statement("SELECT %s, %s").text == b"SELECT $1, $2"


@pytest.mark.parametrize("sql", ["SELECT %(a)s, %s", "SELECT 'x%y'", "SELECT %d"])
def test_what_psycopg_would_refuse_is_refused(sql: str) -> None:
    with pytest.raises(psycopg.ProgrammingError):
        compile_statement(sql)


def test_both_drivers_run_named_positional_and_unparameterised_statements(db: Database) -> None:
    assert db.run(one("SELECT %(a)s::int + %(a)s::int, %(b)s::text", {"a": 20, "b": "x%"})) == (40, "x%")
    assert db.run(one("SELECT %s::int * %s::int", [6, 7])) == (42,)
    assert db.run(one("SELECT '100%%'")) == ("100%%",)  # no parameters: sent as written, as psycopg does

    async def awaited() -> Any:
        await db.open_async(1)
        try:
            return await db.arun(one("SELECT %(a)s::text || '%%'", {"a": "5"}))
        finally:
            await db.close_async()

    assert asyncio.run(awaited()) == ("5%",)


def test_a_missing_parameter_fails_the_operation_as_psycopg_does(db: Database) -> None:
    with pytest.raises(psycopg.ProgrammingError, match="missing: b"):
        db.run(one("SELECT %(a)s::int, %(b)s::int", {"a": 1}))
