"""Store operations, written once and run by either driver (blocking or awaited).

A store operation is a generator: it yields the :class:`Query` objects it needs run and receives
each one's result, then returns its value. It performs no I/O itself, so the same code serves the
gateway, which awaits it on its event loop (:meth:`Database.arun`), and the workers, which block on it
(:meth:`Database.run`). psycopg is built the same way: its protocol is generators, its two connection
classes drive them.

::

    @operation
    def get(tenant_id: str, receipt_id: str) -> Op[Receipt]:
        row = yield Query(GET, {"tenant_id": tenant_id, "id": receipt_id})
        if row is None:
            raise NotFound(f"no receipt {receipt_id}")
        return Receipt.from_tuple(row)

An operation made with :func:`transaction` runs inside one transaction: committed when it returns, rolled back
when it raises. An error of a statement is thrown into the operation, which may handle it; in a
transaction it may only turn it into another exception, since PostgreSQL keeps nothing of a
transaction after a failed statement (an atomic operation that returns after one fails with
``InFailedSqlTransaction``). Others run in autocommit, each statement on its own (most are a single statement:
a transition is one statement of data-modifying CTEs, see :mod:`receipts.store.statements`).

An operation may also yield an :class:`Announce`: the driver hands it to the database's listeners
once the operation has committed (never for one that rolled back).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

Fetch = Literal["one", "all", "rowcount", "none"]


@dataclass(frozen=True, slots=True)
class Query:
    """One SQL statement for psycopg (``%(name)s`` or ``%s`` placeholders) and what to bring back.

    ``fetch``: ``"one"`` the first row as a tuple (or None), ``"all"`` every row as a list of tuples,
    ``"rowcount"`` how many rows it touched, ``"none"`` nothing.

    ``prepared``: whether the connection may keep it as a prepared statement (psycopg does after a
    few runs). PostgreSQL then reuses one generic plan, made for the table as it was when the
    statement was prepared, until the table's statistics change: a read of a set of ids prepared
    while the table was small keeps scanning the whole table as it grows, for as long as nothing
    analyzes it. ``False`` plans it for the table as it is, each time.
    """

    sql: str
    params: Mapping[str, Any] | Sequence[Any] | None = None
    fetch: Fetch = "one"
    prepared: bool = True


@dataclass(frozen=True, slots=True)
class Announce:
    """Something to tell the database's listeners once the operation committed."""

    subject: Any
    messages: int = 0


Step = Query | Announce
Steps = Generator[Step, Any, T]


@dataclass(slots=True)
class Op(Generic[T]):
    """A store operation ready to run: its steps, and whether they form one transaction."""

    steps: Steps[T]
    atomic: bool = False
    name: str = ""


def _wrap(func: Callable[P, Steps[T]], atomic: bool) -> Callable[P, Op[T]]:
    @functools.wraps(func)
    def build(*args: P.args, **kwargs: P.kwargs) -> Op[T]:
        return Op(func(*args, **kwargs), atomic=atomic, name=func.__qualname__)

    return build


def operation(func: Callable[P, Steps[T]]) -> Callable[P, Op[T]]:
    """Make a generator function a store operation (autocommit): calling it returns an :class:`Op`."""
    return _wrap(func, atomic=False)


def transaction(func: Callable[P, Steps[T]]) -> Callable[P, Op[T]]:
    """Make a generator function a store operation whose statements form one transaction."""
    return _wrap(func, atomic=True)


def just(value: T) -> Op[T]:
    """An operation that runs no statement and returns ``value`` (for branches that need none)."""

    def steps() -> Steps[T]:
        return value
        yield  # pragma: no cover - makes this a generator

    return Op(steps())


def subop(op: Op[T]) -> Steps[T]:
    """Run another operation's steps inside this one (``result = yield from subop(other(...))``).

    The inner operation joins the outer one's transaction, if it has one.
    """
    return (yield from op.steps)
