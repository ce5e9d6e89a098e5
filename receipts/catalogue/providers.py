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

from receipts.catalogue.tools import UPSERT, tool_params
from receipts.db import Query, Steps, operation, transaction
from receipts.errors import NotFound
from receipts.records import ToolSpec

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


_SELECT = ("SELECT name, description, parameters, effect, idempotent, timeout_s, max_attempts, queue, definition "
           "FROM tools WHERE tenant_id = %(owner)s ORDER BY name")
_ROW = ("name", "description", "parameters", "effect", "idempotent", "timeout_s", "max_attempts", "queue", "definition")


def _tool(item: ProviderMethod) -> ToolSpec:
    return ToolSpec(name=item.key, kind=KIND, description=item.description, parameters=item.arguments,
                    effect=item.effect, idempotent=item.idempotent, timeout_s=item.timeout_s,
                    max_attempts=item.max_attempts, queue=item.queue, tenant_id=OWNER,
                    definition={"provider": item.provider, "method": item.method, "setup": item.setup,
                                "output": item.output, "provider_description": item.provider_description})


@transaction
def publish(methods: Iterable[ProviderMethod]) -> Steps[None]:
    """Insert or update the methods a worker can run."""
    for item in methods:
        yield Query(UPSERT, tool_params(_tool(item)), fetch="none")


@operation
def all_methods() -> Steps[list[ProviderMethod]]:
    """Every published method, by provider then method."""
    rows = yield Query(_SELECT, {"owner": OWNER}, fetch="all")
    return [ProviderMethod.from_row(dict(zip(_ROW, row, strict=True))) for row in rows]


@operation
def methods(provider: str) -> Steps[list[ProviderMethod]]:
    """The methods of one provider.

    Raises:
        NotFound: no worker has published this provider.
    """
    found = [item for item in (yield from all_methods().steps) if item.provider == provider]
    if not found:
        raise NotFound(f"no integration provider {provider!r}; see GET /v1/integrations")
    return found


@operation
def find(provider: str, method: str) -> Steps[ProviderMethod]:
    """One method.

    Raises:
        NotFound: unknown provider or method.
    """
    for item in (yield from methods(provider).steps):
        if item.method == method:
            return item
    raise NotFound(f"provider {provider!r} has no method {method!r}")
