"""The tool catalogue: workers publish what they can run; the gateway validates calls against it.

A row's ``tenant_id`` is a tenant's id for a tool that tenant defined, ``*`` (:data:`GLOBAL`) for one a
worker published for every tenant. A tenant's own definition hides a global one of the same name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from psycopg.types.json import Jsonb

from receipts.db import Query, Steps, operation, transaction
from receipts.errors import Conflict, InvalidInput, NotFound
from receipts.records import ToolSpec

TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
GLOBAL = "*"
FIELDS = ("tenant_id", "name", "kind", "description", "parameters", "effect", "idempotent", "timeout_s",
          "max_attempts", "queue", "definition", "requires_approval", "approval_timeout_s")
_SELECT = f"SELECT {', '.join(FIELDS)} FROM tools"
_VALUES = ", ".join(f"%({name})s" for name in FIELDS)
UPSERT = (f"INSERT INTO tools ({', '.join(FIELDS)}, updated_at) VALUES ({_VALUES}, now()) "
          "ON CONFLICT (tenant_id, name) DO UPDATE SET "
          + ", ".join(f"{name} = excluded.{name}" for name in FIELDS[2:]) + ", updated_at = now()")
ADD = (f"INSERT INTO tools ({', '.join(FIELDS)}, updated_at) VALUES ({_VALUES}, now()) "
       "ON CONFLICT (tenant_id, name) DO NOTHING")
# The tenant's row sorts before the global one (false < true).
FIND = f"{_SELECT} WHERE name = %(name)s AND tenant_id IN (%(tenant_id)s, '*') ORDER BY tenant_id = '*' LIMIT 1"
LIST = (f"SELECT DISTINCT ON (name) {', '.join(FIELDS)} FROM tools WHERE tenant_id IN (%(tenant_id)s, '*') "
        "ORDER BY name, tenant_id = '*'")
REMOVE = "DELETE FROM tools WHERE tenant_id = %(tenant_id)s AND name = %(name)s"


def check_name(name: str) -> None:
    """Tool names are valid OpenAI and Anthropic function names."""
    if not TOOL_NAME.match(name):
        raise InvalidInput("invalid tool name",
                           errors=[{"field": "name", "message": f"must match {TOOL_NAME.pattern}"}])


def tool_params(spec: ToolSpec) -> dict[str, Any]:
    values = {name: getattr(spec, name) for name in FIELDS}
    values["parameters"] = Jsonb(spec.parameters)
    values["definition"] = Jsonb(spec.definition)
    return values


def spec_of(row: tuple[Any, ...]) -> ToolSpec:
    return ToolSpec(**dict(zip(FIELDS, row, strict=True)))


@transaction
def publish(specs: Iterable[ToolSpec]) -> Steps[None]:
    """Insert or update tool definitions (a worker at start, or a tenant's definition)."""
    for spec in specs:
        check_name(spec.name)
        yield Query(UPSERT, tool_params(spec), fetch="none")


@operation
def add(spec: ToolSpec) -> Steps[None]:
    """Insert a new tool definition (a tenant's, over the API); never replaces one.

    Raises:
        Conflict: this owner already has a tool called ``spec.name``.
    """
    check_name(spec.name)
    if (yield Query(ADD, tool_params(spec), fetch="rowcount")) == 0:
        raise Conflict(f"a tool named {spec.name!r} already exists")


@operation
def find(tenant_id: str, name: str) -> Steps[ToolSpec]:
    """The tool a tenant calls by ``name``: its own definition first, then a global one.

    Raises:
        NotFound: no such tool for this tenant.
    """
    row = yield Query(FIND, {"tenant_id": tenant_id, "name": name})
    if row is None:
        raise NotFound(f"no tool named {name!r}")
    return spec_of(row)


@operation
def list_tools(tenant_id: str) -> Steps[list[ToolSpec]]:
    """Every tool a tenant can call, by name (a tenant's definition hides a global one)."""
    rows = yield Query(LIST, {"tenant_id": tenant_id}, fetch="all")
    return [spec_of(row) for row in rows]


@operation
def remove(tenant_id: str, name: str) -> Steps[None]:
    """Remove a tool the tenant defined.

    Raises:
        NotFound: the tenant defined no such tool.
    """
    if (yield Query(REMOVE, {"tenant_id": tenant_id, "name": name}, fetch="rowcount")) == 0:
        raise NotFound(f"no tool named {name!r}")
