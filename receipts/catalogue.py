"""The tool catalogue: workers publish what they can run; the gateway validates calls against it."""

from __future__ import annotations

import re
from collections.abc import Iterable

from sqlalchemy import delete, or_, select

from receipts.db import Database, dialect_insert, utcnow
from receipts.errors import Conflict, InvalidInput, NotFound
from receipts.records import ToolSpec
from receipts.tables import tools

TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
GLOBAL = "*"


def check_name(name: str) -> None:
    """Tool names are valid OpenAI and Anthropic function names."""
    if not TOOL_NAME.match(name):
        raise InvalidInput(
            "invalid tool name",
            errors=[{"field": "name", "message": f"must match {TOOL_NAME.pattern}"}],
        )


class Catalogue:
    """Reads and writes the ``tools`` table."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def publish(self, specs: Iterable[ToolSpec]) -> None:
        """Insert or update tool definitions (a worker at start, or a tenant's definition)."""
        now = utcnow()
        with self.db.transaction() as conn:
            for spec in specs:
                check_name(spec.name)
                values = {
                    "tenant_id": spec.tenant_id,
                    "name": spec.name,
                    "kind": spec.kind,
                    "description": spec.description,
                    "parameters": spec.parameters,
                    "effect": spec.effect,
                    "idempotent": spec.idempotent,
                    "timeout_s": spec.timeout_s,
                    "max_attempts": spec.max_attempts,
                    "queue": spec.queue,
                    "definition": spec.definition,
                    "updated_at": now,
                }
                stmt = dialect_insert(conn)(tools).values(**values)
                stmt = stmt.on_conflict_do_update(
                    index_elements=["tenant_id", "name"],
                    set_={k: v for k, v in values.items() if k not in ("tenant_id", "name")},
                )
                conn.execute(stmt)

    def add(self, spec: ToolSpec) -> None:
        """Insert a new tool definition (a tenant's, over the API); never replaces one.

        Raises:
            Conflict: this owner already has a tool called ``spec.name``.
        """
        check_name(spec.name)
        values = {name: getattr(spec, name) for name in ToolSpec.__dataclass_fields__}
        with self.db.transaction() as conn:
            stmt = dialect_insert(conn)(tools).values(**values, updated_at=utcnow())
            inserted = conn.execute(stmt.on_conflict_do_nothing(index_elements=["tenant_id", "name"]))
        if inserted.rowcount == 0:
            raise Conflict(f"a tool named {spec.name!r} already exists")

    def find(self, tenant_id: str, name: str) -> ToolSpec:
        """The tool a tenant calls by ``name``: its own definition first, then a global one.

        Raises:
            NotFound: no such tool for this tenant.
        """
        with self.db.read() as conn:
            rows = conn.execute(
                select(tools).where(tools.c.name == name, tools.c.tenant_id.in_([tenant_id, GLOBAL]))
            ).mappings().all()
        if not rows:
            raise NotFound(f"no tool named {name!r}")
        rows = sorted(rows, key=lambda row: row["tenant_id"] == GLOBAL)
        return ToolSpec.from_row(rows[0])

    def list(self, tenant_id: str) -> list[ToolSpec]:
        """Every tool a tenant can call, by name (a tenant's definition hides a global one)."""
        with self.db.read() as conn:
            rows = conn.execute(
                select(tools).where(or_(tools.c.tenant_id == tenant_id, tools.c.tenant_id == GLOBAL))
            ).mappings().all()
        chosen: dict[str, ToolSpec] = {}
        for row in sorted(rows, key=lambda row: row["tenant_id"] != GLOBAL):
            chosen[row["name"]] = ToolSpec.from_row(row)
        return [chosen[name] for name in sorted(chosen)]

    def remove(self, tenant_id: str, name: str) -> None:
        with self.db.transaction() as conn:
            result = conn.execute(delete(tools).where(tools.c.tenant_id == tenant_id, tools.c.name == name))
        if result.rowcount == 0:
            raise NotFound(f"no tool named {name!r}")
