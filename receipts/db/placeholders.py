"""Statements with ``%(name)s`` placeholders, turned into PostgreSQL's ``$n`` once per statement.

The store's statements are written with psycopg's named placeholders, and psycopg converts each to
PostgreSQL's ``$1, $2, ...`` every time it runs, unless the statement is short: it caches the
conversion only for statements under 4 KiB, and the store's transitions (a state change with its
timeline and outbox writes in one statement) are longer. A long statement is then parsed anew on
every call, and the new text hashed again to find its prepared statement: a tenth of the gateway's
time on a batch. So the drivers run statements through psycopg's raw-query cursors (which take
``$n`` and a sequence of parameters, as they are) and convert each statement text here once.

The conversion is psycopg's: ``%(name)s`` (the same name, the same ``$n``) or ``%s`` (in order), and
``%%`` for a literal ``%``; a statement run without parameters is sent as it is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import psycopg

_PLACEHOLDER = re.compile(r"%(?:\((\w+)\))?(.)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Statement:
    """A statement in PostgreSQL's terms: its text, and the parameter names in ``$n`` order (None: by
    position)."""

    text: bytes
    names: tuple[str, ...] | None

    def parameters(self, params: Mapping[str, Any] | Sequence[Any]) -> Sequence[Any]:
        """``params`` in ``$n`` order."""
        if self.names == ():  # no placeholders: nothing to pass, whichever way none were given
            return ()
        if self.names is None:
            if isinstance(params, Mapping):
                raise psycopg.ProgrammingError("the statement's placeholders are %s: pass a sequence")
            return params
        if not isinstance(params, Mapping):
            raise psycopg.ProgrammingError("the statement's placeholders are %(name)s: pass a mapping")
        try:
            return [params[name] for name in self.names]
        except KeyError as exc:
            raise psycopg.ProgrammingError(f"query parameter missing: {exc.args[0]}") from None


@lru_cache(maxsize=1024)  # the store's statements are a bounded set of texts (a few are composed of parts)
def compile_statement(sql: str) -> Statement:
    """``sql`` with its placeholders numbered.

    Raises:
        psycopg.ProgrammingError: a ``%`` that is not a placeholder, or named and positional ones mixed.
    """
    parts: list[str] = []
    names: list[str] = []
    positional = 0
    end = 0
    for match in _PLACEHOLDER.finditer(sql):
        parts.append(sql[end:match.start()])
        end = match.end()
        name, kind = match.groups()
        if kind == "%" and name is None:
            parts.append("%")
            continue
        if kind != "s":
            raise psycopg.ProgrammingError(f"only %s, %(name)s and %% are placeholders, not {match.group()!r}")
        if name is None:
            positional += 1
            parts.append(f"${positional}")
            continue
        if name not in names:
            names.append(name)
        parts.append(f"${names.index(name) + 1}")
    parts.append(sql[end:])
    if positional and names:
        raise psycopg.ProgrammingError("a statement's placeholders are all %s or all %(name)s")
    return Statement("".join(parts).encode(), None if positional else tuple(names))


def raw(sql: str, params: Mapping[str, Any] | Sequence[Any] | None) -> tuple[bytes | str, Sequence[Any] | None]:
    """What a raw-query cursor executes for ``sql`` with ``params``."""
    if params is None:
        return sql, None
    statement = compile_statement(sql)
    return statement.text, statement.parameters(params)
