"""What an integration provider is: methods with schemas, a setup schema, and what a method is handed.

A provider module builds one :class:`Provider`: its name, a setup schema (per-tenant values stored
encrypted; ``writeOnly`` properties are secrets) and its :class:`Method` objects, each with an
arguments schema, an output schema, its effect contract and an ``async`` function
``run(values, call)``. ``values`` is the merge of the call's arguments, the tool definition's fixed
arguments and the stored setup (later ones win), already checked against :meth:`Provider.schema_for`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from receipts.catalogue.providers import ProviderMethod
from receipts.outbound.guard import OutboundGuard
from receipts.settings import Settings
from workers import egress
from workers.errors import UpstreamError

Values = dict[str, Any]


@dataclass(frozen=True)
class Call:
    """What a method may use besides its values: the call's identity, settings and HTTP clients."""

    receipt_id: str
    tenant_id: str
    timeout_s: float
    settings: Settings
    guard: OutboundGuard
    clients: egress.Clients  # guarded: for URLs that come from tenants or models
    trusted: egress.Clients  # for the operator's configured base URLs (TOOLRELAY_*_BASE_URL)

    def request_timeout(self) -> float:
        """Per HTTP request: the configured outbound timeout, within what the attempt has left."""
        return max(0.1, min(self.settings.outbound_timeout_s, self.timeout_s))

    async def get_json(self, client: httpx.AsyncClient, url: str, params: Mapping[str, Any],
                       what: str) -> dict[str, Any]:
        """GET ``url`` and decode its JSON object; failures mapped to the receipt's error vocabulary."""
        full = str(httpx.URL(url).copy_merge_params({k: v for k, v in params.items() if v is not None}))
        fetched = await egress.fetch(client, "GET", full, timeout_s=self.request_timeout(),
                                     max_bytes=self.settings.http_max_bytes)
        failure = egress.failure_for(fetched, what)
        if failure is not None:
            raise failure
        if fetched.truncated:
            raise UpstreamError(f"{what} answered more than {self.settings.http_max_bytes} bytes", retryable=False)
        try:
            data = json.loads(fetched.content)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise UpstreamError(f"{what} did not answer a JSON object", retryable=False,
                                details={"body": fetched.excerpt()})
        return data


Runner = Callable[[Values, Call], Awaitable[Any]]


@dataclass(frozen=True)
class Method:
    """One operation of a provider."""

    name: str
    description: str
    arguments: dict[str, Any]
    output: dict[str, Any]
    run: Runner
    effect: str = "read"
    idempotent: bool = True
    timeout_s: float = 30.0
    max_attempts: int = 3


@dataclass(frozen=True)
class Provider:
    """A built-in integration: ``email``, ``wikipedia``, ``weather``, ``mcp``, ``http``."""

    name: str
    description: str
    setup: dict[str, Any]
    methods: tuple[Method, ...] = field(default_factory=tuple)

    def method(self, name: str) -> Method | None:
        return next((item for item in self.methods if item.name == name), None)

    def declarations(self) -> list[ProviderMethod]:
        """What the catalogue publishes for the gateway (names and schemas, no code)."""
        return [
            ProviderMethod(provider=self.name, method=item.name, description=item.description,
                           arguments=item.arguments, setup=self.setup, output=item.output, effect=item.effect,
                           idempotent=item.idempotent, timeout_s=item.timeout_s, max_attempts=item.max_attempts,
                           provider_description=self.description)
            for item in self.methods
        ]

    def schema_for(self, method: Method) -> dict[str, Any]:
        """The schema the merged values must satisfy: the method's arguments plus the provider's setup."""
        properties = {**(self.setup.get("properties") or {}), **(method.arguments.get("properties") or {})}
        required = list(dict.fromkeys([*(self.setup.get("required") or []), *(method.arguments.get("required") or [])]))
        return {"type": "object", "properties": properties, "required": required}


def schema(properties: dict[str, Any], required: list[str] | None = None, *, closed: bool = True) -> dict[str, Any]:
    """A JSON Schema object (small helper to keep provider modules readable)."""
    data: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        data["required"] = required
    if closed:
        data["additionalProperties"] = False
    return data
