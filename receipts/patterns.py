"""The regular expressions of JSON Schemas, matched in linear time (RE2), never by backtracking.

A tool's schema comes from a tenant (``POST /v1/tools``) or from an MCP server it points toolrelay
at; its ``pattern`` and ``patternProperties`` run against a model's arguments on the gateway's event
loop. Python's ``re`` backtracks: ``^(a+)+$`` against thirty ``a`` and a ``b`` takes minutes, and a
gateway stalled on it serves no one. RE2 (``google-re2``) matches in time linear in the input.

* :func:`install` makes jsonschema match with RE2: its keywords call ``re.search`` from the modules
  ``jsonschema._keywords`` (``pattern``, ``patternProperties``) and ``jsonschema._utils``
  (``additionalProperties`` and ``unevaluatedProperties`` next to ``patternProperties``). Those are
  jsonschema's internals, so ``pyproject.toml`` pins the minor version tested, and
  ``tests/unit/receipts/test_patterns.py`` fails if they stop being where this module puts RE2.
* :func:`validator` is the validator of a tool's arguments; :func:`check_schema` checks a schema,
  its patterns too, when a tool is defined: one RE2 cannot run (lookaround, backreferences) is
  refused there with the reason.
* A pattern RE2 cannot run that reached the catalogue anyway (an MCP server's schema) matches
  nothing: an argument it constrains fails the schema, with a message saying why, rather than run
  by a backtracking engine.

RE2 follows ECMA-262 (JSON Schema's dialect) more closely than ``re``: ``\\d`` and ``\\w`` are ASCII.
"""

from __future__ import annotations

import functools
import re
import types
from typing import Any

import jsonschema._keywords
import jsonschema._utils
import re2
from jsonschema import Draft202012Validator, FormatChecker

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is reported to whoever defined it, not to stderr
# What one compiled pattern may take (its program and the cache of its matching automaton; past
# that RE2 still matches in linear time, without the cache), and how many are kept: 1 GiB at most.
_OPTIONS.max_mem = 2 << 20
CACHED = 512


class UnsupportedPattern(ValueError):
    """A pattern RE2 cannot run (lookaround, a backreference, a repetition over 1000)."""


@functools.lru_cache(maxsize=CACHED)
def compiled(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (cached). Raises UnsupportedPattern with RE2's reason."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise UnsupportedPattern(f"{pattern!r} is not a pattern toolrelay can match in linear time "
                                 f"(RE2 syntax: no lookaround or backreferences): {reason}") from None


def search(pattern: str, string: str) -> Any:
    """``re.search`` with RE2: the match, or None (also for a pattern RE2 cannot run)."""
    try:
        return compiled(pattern).search(string)
    except UnsupportedPattern:
        return None


# What jsonschema's keyword modules see as ``re``: RE2's search, and the rest of ``re`` as it is.
SAFE_RE = types.SimpleNamespace(**{**{name: getattr(re, name) for name in re.__all__}, "search": search})


def install() -> None:
    """Make jsonschema match every schema pattern with RE2 (idempotent; see the module's docstring)."""
    jsonschema._keywords.re = SAFE_RE  # type: ignore[attr-defined]
    jsonschema._utils.re = SAFE_RE  # type: ignore[attr-defined]


def _is_pattern(instance: object) -> bool:
    if isinstance(instance, str):
        compiled(instance)
    return True


# The 2020-12 meta-schema gives ``pattern`` and the keys of ``patternProperties`` the format "regex".
FORMAT_CHECKER = FormatChecker(Draft202012Validator.FORMAT_CHECKER.checkers)
FORMAT_CHECKER.checks("regex", raises=UnsupportedPattern)(_is_pattern)


def validator(schema: Any) -> Draft202012Validator:
    """The validator of instances of ``schema`` (JSON Schema 2020-12), its patterns matched by RE2
    (installed as this module is imported)."""
    return Draft202012Validator(schema)


def check_schema(schema: Any) -> None:
    """Raise jsonschema's SchemaError unless ``schema`` is a valid 2020-12 schema whose every pattern
    RE2 can run (the error's ``cause`` is then the UnsupportedPattern saying why)."""
    Draft202012Validator.check_schema(schema, format_checker=FORMAT_CHECKER)


install()
