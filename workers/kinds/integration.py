"""``integration`` tools: a method of a built-in provider, with the tenant's stored setup.

Values are merged in this order, later ones winning (DESIGN.md): the call's arguments, then the
tool definition's fixed arguments, then the tenant's stored setup, so neither a model nor a caller
can override what the tenant configured (an SMTP host, an MCP server URL). The merge is checked
against the provider's schema before anything is sent: a missing or invalid value fails the call
with ``invalid_arguments`` naming the field and where it should come from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from receipts import patterns
from receipts.catalogue import providers as provider_methods
from receipts.catalogue.setups import IntegrationSetups
from receipts.db import Database
from receipts.outbound.guard import OutboundGuard
from receipts.records import Receipt
from receipts.secretbox import SecretKeyMissing, SecretUnreadable
from receipts.settings import Settings
from workers import egress
from workers.context import ToolContext
from workers.errors import InvalidArguments, ToolFailure
from workers.integrations.base import Call, Method, Provider
from workers.kinds.definitions import definition_of
from workers.runner import Invocation


def merge(arguments: Mapping[str, Any], fixed: Mapping[str, Any], setup: Mapping[str, Any]) -> dict[str, Any]:
    """call arguments < tool definition < stored setup."""
    return {**arguments, **fixed, **setup}


def check(provider: Provider, method: Method, values: Mapping[str, Any], *, fixed: Mapping[str, Any],
          setup: Mapping[str, Any]) -> None:
    """Raise InvalidArguments naming the first missing or invalid field, and where it comes from."""
    validator = patterns.validator(provider.schema_for(method))
    errors = sorted(validator.iter_errors(dict(values)), key=lambda e: (e.validator != "required", list(e.path)))
    if not errors:
        return
    err = errors[0]
    setup_fields = set(provider.setup.get("properties") or {})
    where = f"PUT /v1/integrations/{provider.name}/setup"
    if err.validator == "required":
        missing = [name for name in err.validator_value if name not in values]
        in_setup = [name for name in missing if name in setup_fields]
        if in_setup:
            listed = ", ".join(repr(name) for name in in_setup)
            message = (f"missing setup field {listed} for {provider.name}: store it with {where} "
                       f"(or fix it in the tool definition)")
        else:
            message = f"missing argument {', '.join(repr(name) for name in missing)}"
        raise InvalidArguments(message, details={"field": (in_setup or missing)[0], "missing": missing,
                                                 "provider": provider.name})
    name = str(err.path[0]) if err.path else ""
    source = "stored setup" if name in setup else "tool definition" if name in fixed else "arguments"
    hint = f"; fix it with {where}" if source == "stored setup" else ""
    raise InvalidArguments(f"invalid {name or 'value'} in the {source}: {err.message}{hint}",
                           details={"field": name, "source": source, "provider": provider.name})


class IntegrationKind:
    """Prepares integration invocations; publishes the providers' declarations when a worker starts."""

    def __init__(self, db: Database, setups: IntegrationSetups, providers: Mapping[str, Provider],
                 settings: Settings) -> None:
        self.db = db
        self.setups = setups
        self.providers = providers
        self.settings = settings
        self.guard = OutboundGuard(settings.outbound_allow_cidrs)
        self.clients = egress.Clients(self.guard)
        self.trusted = egress.Clients(None)

    def publish(self) -> None:
        self.db.run(provider_methods.publish(
            [item for provider in self.providers.values() for item in provider.declarations()]))

    def _setup(self, tenant_id: str, provider: str) -> dict[str, Any]:
        try:
            return self.db.run(self.setups.get(tenant_id, provider)) or {}
        except SecretUnreadable:
            raise InvalidArguments(f"the stored setup of {provider} cannot be decrypted (TOOLRELAY_SECRET_KEY "
                                   f"changed?): store it again with PUT /v1/integrations/{provider}/setup",
                                   details={"provider": provider}) from None
        except SecretKeyMissing:
            raise InvalidArguments("TOOLRELAY_SECRET_KEY is not set on this worker: stored setups cannot be read",
                                   details={"provider": provider}) from None

    def prepare(self, receipt: Receipt, context: ToolContext) -> Invocation:
        spec = definition_of(self.db, receipt)
        name, method_name = spec.definition.get("provider", ""), spec.definition.get("method", "")
        provider = self.providers.get(name)
        method = provider.method(method_name) if provider else None
        if provider is None or method is None:
            raise ToolFailure(f"this worker has no integration {name}.{method_name}", retryable=False)
        fixed = spec.definition.get("arguments") or {}
        setup = self._setup(receipt.tenant_id, name)
        values = merge(receipt.input if isinstance(receipt.input, dict) else {}, fixed, setup)
        check(provider, method, values, fixed=fixed, setup=setup)
        call = Call(receipt_id=receipt.id, tenant_id=receipt.tenant_id, timeout_s=context.timeout_s,
                    settings=self.settings, guard=self.guard, clients=self.clients, trusted=self.trusted)
        return Invocation(method.run, {"values": values, "call": call}, is_async=True)
