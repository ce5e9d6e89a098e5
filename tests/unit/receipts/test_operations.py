"""The two drivers of store operations: the same operation, blocking or awaited, with the same result.

Every test here runs once through ``Database.run`` and once through ``Database.arun`` on an event
loop, against a scratch table of the test's own database.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
import pytest

from receipts.db import Announce, Database, Op, Query, Steps, just, operation, subop, transaction
from receipts.store import calls
from tests.support import sql
from tests.support.factories import TENANT, call

T = TypeVar("T")
Driver = Callable[[Op[Any]], Any]


@pytest.fixture
def scratch(db: Database) -> Database:
    sql.execute(db, "CREATE TABLE scratch (n integer PRIMARY KEY, label text)")
    return db


@pytest.fixture(params=["run", "arun"])
def drive(request: pytest.FixtureRequest, db: Database) -> Iterator[Driver]:
    """Runs an operation to its end through one of the drivers (``arun`` on an event loop of its own)."""
    if request.param == "run":
        yield db.run
        return
    with asyncio.Runner() as runner:
        runner.run(db.open_async(2))

        def awaited(op: Op[T]) -> T:
            return runner.run(db.arun(op))

        try:
            yield awaited
        finally:
            runner.run(db.close_async())


def numbers(db: Database) -> list[int]:
    return [n for (n,) in sql.rows(db, "SELECT n FROM scratch ORDER BY n")]


@operation
def insert(n: int, label: str = "") -> Steps[int]:
    return (yield Query("INSERT INTO scratch (n, label) VALUES (%(n)s, %(label)s)", {"n": n, "label": label},
                        fetch="rowcount"))


@transaction
def insert_all_then(ns: list[int], failure: BaseException | None = None) -> Steps[int]:
    """Insert each of ``ns`` in one transaction, then raise ``failure`` (if any)."""
    for n in ns:
        yield from subop(insert(n))
    if failure is not None:
        raise failure
    return len(ns)


@operation
def each_kind_of_result(n: int) -> Steps[tuple[Any, ...]]:
    """One statement of every fetch kind, each fed by the result of the one before."""
    inserted = yield Query("INSERT INTO scratch (n, label) SELECT g, 'row ' || g FROM generate_series(1, %s) AS g",
                           [n], fetch="rowcount")
    first = yield Query("SELECT n, label FROM scratch ORDER BY n LIMIT 1")
    every = yield Query("SELECT n FROM scratch WHERE n >= %(from)s ORDER BY n", {"from": first[0]}, fetch="all")
    nothing = yield Query("UPDATE scratch SET label = upper(label) WHERE n = %(n)s", {"n": every[-1][0]},
                          fetch="none")
    missing = yield Query("SELECT n FROM scratch WHERE n < 0")
    return inserted, first, every, nothing, missing


def test_an_operation_gives_the_same_result_through_either_driver(scratch: Database) -> None:
    with asyncio.Runner() as runner:
        runner.run(scratch.open_async(1))
        try:
            blocking = scratch.run(each_kind_of_result(3))
            blocking_rows = sql.rows(scratch, "SELECT n, label FROM scratch ORDER BY n")
            sql.execute(scratch, "DELETE FROM scratch")
            awaited = runner.run(scratch.arun(each_kind_of_result(3)))
            awaited_rows = sql.rows(scratch, "SELECT n, label FROM scratch ORDER BY n")
        finally:
            runner.run(scratch.close_async())
    assert blocking == awaited == (3, (1, "row 1"), [(1,), (2,), (3,)], None, None)
    assert blocking_rows == awaited_rows == [(1, "row 1"), (2, "row 2"), (3, "ROW 3")]


def test_a_store_operation_gives_the_same_result_through_either_driver(db: Database, drive: Driver) -> None:
    receipt, replayed = drive(calls.create(call(idempotency_key="k", request_hash="h")))
    assert not replayed
    assert drive(calls.get(TENANT, receipt.id)) == db.run(calls.get(TENANT, receipt.id)) == receipt
    assert drive(calls.create(call(idempotency_key="k", request_hash="h"))) == (receipt, True)
    assert drive(calls.list_receipts(TENANT)) == db.run(calls.list_receipts(TENANT))
    assert drive(just(42)) == 42


def test_a_transaction_commits_every_statement_when_it_returns(scratch: Database, drive: Driver) -> None:
    assert drive(insert_all_then([1, 2, 3])) == 3
    assert numbers(scratch) == [1, 2, 3]


def test_a_transaction_rolls_back_every_statement_when_it_raises(scratch: Database, drive: Driver) -> None:
    with pytest.raises(LookupError, match="changed my mind"):
        drive(insert_all_then([1, 2, 3], LookupError("changed my mind")))
    assert numbers(scratch) == []


def test_a_transaction_rolls_back_every_statement_when_one_fails(scratch: Database, drive: Driver) -> None:
    drive(insert(2))
    with pytest.raises(psycopg.errors.UniqueViolation):
        drive(insert_all_then([1, 2, 3]))  # 1 went in before 2 failed
    assert numbers(scratch) == [2]


def test_without_a_transaction_each_statement_commits_on_its_own(scratch: Database, drive: Driver) -> None:
    @operation
    def insert_then_fail() -> Steps[None]:
        yield from subop(insert(1))
        raise LookupError("after the first statement")

    with pytest.raises(LookupError):
        drive(insert_then_fail())
    assert numbers(scratch) == [1]


# -- announcements -----------------------------------------------------------------------------


@transaction
def announce_then_insert(n: int, failure: BaseException | None = None) -> Steps[None]:
    """Announce ``n`` first, then insert it; raise ``failure`` (if any) before the end."""
    yield Announce(subject=n, messages=1)
    yield from subop(insert(n))
    if failure is not None:
        raise failure


def test_an_announcement_reaches_listeners_only_once_committed(scratch: Database, drive: Driver) -> None:
    heard: list[tuple[Any, int, list[int]]] = []
    # What the listener sees from another connection: the inserted row is there, so it was committed.
    scratch.subscribe(lambda item: heard.append((item.subject, item.messages, numbers(scratch))))
    drive(announce_then_insert(7))
    assert heard == [(7, 1, [7])]


def test_a_rolled_back_operation_announces_nothing(scratch: Database, drive: Driver) -> None:
    heard: list[Any] = []
    scratch.subscribe(lambda item: heard.append(item.subject))
    with pytest.raises(LookupError):
        drive(announce_then_insert(7, LookupError("no")))
    drive(insert(7))
    with pytest.raises(psycopg.errors.UniqueViolation):
        drive(announce_then_insert(7))  # the insert fails after the announcement was yielded
    assert heard == []
    assert numbers(scratch) == [7]


def test_every_listener_hears_every_announcement_in_order(scratch: Database, drive: Driver) -> None:
    first: list[Any] = []
    second: list[Any] = []
    scratch.subscribe(lambda item: first.append(item.subject))
    scratch.subscribe(lambda item: second.append(item.subject))

    @operation
    def announce_twice() -> Steps[None]:
        yield Announce("a")
        yield Announce("b", messages=2)

    drive(announce_twice())
    assert first == second == ["a", "b"]


# -- statement errors --------------------------------------------------------------------------


def test_a_statement_error_is_thrown_into_the_operation_which_may_handle_it(scratch: Database,
                                                                           drive: Driver) -> None:
    @operation
    def insert_or_relabel(n: int, label: str) -> Steps[str]:
        try:
            yield from subop(insert(n, label))
        except psycopg.errors.UniqueViolation:
            yield Query("UPDATE scratch SET label = %(label)s WHERE n = %(n)s", {"n": n, "label": label},
                        fetch="none")
            return "relabeled"
        return "inserted"

    assert drive(insert_or_relabel(1, "first")) == "inserted"
    assert drive(insert_or_relabel(1, "second")) == "relabeled"
    assert sql.rows(scratch, "SELECT n, label FROM scratch") == [(1, "second")]


def test_a_statement_error_the_operation_does_not_handle_is_raised_as_it_is(scratch: Database,
                                                                            drive: Driver) -> None:
    @operation
    def divide() -> Steps[Any]:
        return (yield Query("SELECT 1 / 0"))

    with pytest.raises(psycopg.errors.DivisionByZero):
        drive(divide())
    assert drive(insert(1)) == 1  # the connection is fine afterwards


def test_a_transaction_that_handled_a_failed_statement_is_not_committed_as_if_it_succeeded(
        scratch: Database, drive: Driver) -> None:
    """After a failed statement PostgreSQL keeps nothing of the transaction: returning is no commit."""
    @transaction
    def insert_ignoring_duplicates(ns: list[int]) -> Steps[int]:
        for n in ns:
            with contextlib.suppress(psycopg.Error):
                yield from subop(insert(n))
        return len(ns)

    drive(insert(2))
    with pytest.raises(psycopg.errors.InFailedSqlTransaction):
        drive(insert_ignoring_duplicates([1, 2, 3]))
    assert numbers(scratch) == [2]
    assert drive(insert_ignoring_duplicates([4, 5])) == 2  # the connection is fine afterwards
    assert numbers(scratch) == [2, 4, 5]
