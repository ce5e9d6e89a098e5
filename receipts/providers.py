"""The integration providers workers can run, as the gateway sees them: names and JSON Schemas only.

A worker publishes each method of each built-in provider (``email.send``, ``wikipedia.search``...)
when it starts, like it publishes its tools. The gateway reads them to validate an integration tool
definition (``POST /v1/tools {"kind": "integration", "provider", "method"}``) and a stored setup
(``PUT /v1/integrations/{provider}/setup``) without importing any provider code.

They live in the ``tools`` table under the reserved owner ``@integration`` (no tenant id can take that
value, and tool lookups only ever read a tenant's own rows and the global ``*`` ones), so a provider
method is a template a tenant enables, never a tool anybody can call as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from receipts.db import Database, dialect_insert, utcnow
from receipts.errors import NotFound
from receipts.tables import tools

OWNER = "@integration"
KIND = "provider"


@dataclass(frozen=True, slots=True)
class ProviderMethod:
    """One method of an integration provider and the contract it declares.

    ``setup`` is the provider's setup schema (shared by its methods): values stored per tenant with
    ``PUT /v1/integrations/{provider}/setup``; properties marked ``writeOnly`` are secrets, which a
    tool definition may not carry. ``arguments`` is what a call passes, ``output`` what it returns.
    """

    provider: str
    method: str
    description: str
    arguments: dict[str, Any]
    setup: dict[str, Any]
    output: dict[str, Any]
    effect: str = "read"
    idempotent: bool = True
    timeout_s: float = 30.0
    max_attempts: int = 3
    queue: str = "tools"
    provider_description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.provider}.{self.method}"

    @property
    def secret_fields(self) -> list[str]:
        properties: Mapping[str, Any] = self.setup.get("properties") or {}
        return sorted(name for name, prop in properties.items() if prop.get("writeOnly"))

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> ProviderMethod:
        definition = row["definition"]
        return cls(
            provider=definition["provider"],
            method=definition["method"],
            description=row["description"],
            arguments=row["parameters"],
            setup=definition.get("setup") or {"type": "object", "properties": {}},
            output=definition.get("output") or {},
            effect=row["effect"],
            idempotent=row["idempotent"],
            timeout_s=row["timeout_s"],
            max_attempts=row["max_attempts"],
            queue=row["queue"],
            provider_description=definition.get("provider_description", ""),
        )

    def to_api(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "description": self.description,
            "arguments": self.arguments,
            "output": self.output,
            "effect": self.effect,
            "idempotent": self.idempotent,
            "timeout_s": self.timeout_s,
        }


class Providers:
    """Reads and writes provider methods in the catalogue table."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def publish(self, methods: Iterable[ProviderMethod]) -> None:
        """Insert or update the methods a worker can run."""
        now = utcnow()
        with self.db.transaction() as conn:
            for item in methods:
                values = {
                    "tenant_id": OWNER,
                    "name": item.key,
                    "kind": KIND,
                    "description": item.description,
                    "parameters": item.arguments,
                    "effect": item.effect,
                    "idempotent": item.idempotent,
                    "timeout_s": item.timeout_s,
                    "max_attempts": item.max_attempts,
                    "queue": item.queue,
                    "definition": {"provider": item.provider, "method": item.method, "setup": item.setup,
                                   "output": item.output, "provider_description": item.provider_description},
                    "updated_at": now,
                }
                stmt = dialect_insert(conn)(tools).values(**values)
                conn.execute(stmt.on_conflict_do_update(
                    index_elements=["tenant_id", "name"],
                    set_={k: v for k, v in values.items() if k not in ("tenant_id", "name")},
                ))

    def all(self) -> list[ProviderMethod]:
        """Every published method, by provider then method."""
        with self.db.read() as conn:
            rows = conn.execute(
                select(tools).where(tools.c.tenant_id == OWNER).order_by(tools.c.name)).mappings().all()
        return [ProviderMethod.from_row(row) for row in rows]

    def methods(self, provider: str) -> list[ProviderMethod]:
        """The methods of one provider.

        Raises:
            NotFound: no worker has published this provider.
        """
        found = [item for item in self.all() if item.provider == provider]
        if not found:
            raise NotFound(f"no integration provider {provider!r}; see GET /v1/integrations")
        return found

    def find(self, provider: str, method: str) -> ProviderMethod:
        """One method.

        Raises:
            NotFound: unknown provider or method.
        """
        for item in self.methods(provider):
            if item.method == method:
                return item
        raise NotFound(f"provider {provider!r} has no method {method!r}")
