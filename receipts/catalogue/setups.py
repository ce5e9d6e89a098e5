"""Per-tenant setup of integration providers (SMTP passwords, API keys, server URLs), encrypted at rest.

The gateway writes it (``PUT /v1/integrations/{provider}/setup``) and shows only which fields are
set, never their values; workers read it when they run an integration tool. Values are encrypted
with :class:`~receipts.secretbox.SecretBox` (``TOOLRELAY_SECRET_KEY``) and never logged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from receipts.db import Query, Steps, operation
from receipts.errors import NotFound
from receipts.secretbox import SecretBox


@dataclass(frozen=True, slots=True)
class SetupSummary:
    """What the API may show of a stored setup: the names of the fields that are set."""

    provider: str
    fields: list[str]
    updated_at: datetime

    def to_api(self) -> dict[str, Any]:
        return {"provider": self.provider, "configured": True, "fields_set": self.fields,
                "updated_at": self.updated_at.isoformat().replace("+00:00", "Z")}


PUT = ("INSERT INTO integration_setups (tenant_id, provider, config, updated_at) VALUES (%(tenant_id)s, %(provider)s, "
       "%(config)s, now()) ON CONFLICT (tenant_id, provider) DO UPDATE SET config = excluded.config, "
       "updated_at = now() RETURNING updated_at")
GET = "SELECT config, updated_at FROM integration_setups WHERE tenant_id = %(tenant_id)s AND provider = %(provider)s"
CONFIGURED = "SELECT provider, updated_at FROM integration_setups WHERE tenant_id = %(tenant_id)s"
DELETE = "DELETE FROM integration_setups WHERE tenant_id = %(tenant_id)s AND provider = %(provider)s"


class IntegrationSetups:
    """Encrypted setups by (tenant, provider): operations to run. ``box`` is built on first use (it needs
    the secret key)."""

    def __init__(self, box: SecretBox | Callable[[], SecretBox]) -> None:
        self._box = box

    @property
    def box(self) -> SecretBox:
        if not isinstance(self._box, SecretBox):
            self._box = self._box()  # raises SecretKeyMissing when TOOLRELAY_SECRET_KEY is unset
        return self._box

    @operation
    def put(self, tenant_id: str, provider: str, config: dict[str, Any]) -> Steps[SetupSummary]:
        """Store (replace) a tenant's setup of ``provider``."""
        token = self.box.encrypt_json(config)
        (updated_at,) = yield Query(PUT, {"tenant_id": tenant_id, "provider": provider, "config": token})
        return SetupSummary(provider, sorted(config), updated_at)

    @operation
    def get(self, tenant_id: str, provider: str) -> Steps[dict[str, Any] | None]:
        """The decrypted setup, or None when the tenant stored none.

        Raises:
            SecretUnreadable: it was encrypted with another key.
        """
        row = yield Query(GET, {"tenant_id": tenant_id, "provider": provider})
        if row is None:
            return None
        value = self.box.decrypt_json(row[0])
        return value if isinstance(value, dict) else {}

    @operation
    def summary(self, tenant_id: str, provider: str) -> Steps[SetupSummary]:
        """Which fields are set.

        Raises:
            NotFound: no setup stored for this provider.
            SecretUnreadable: it was encrypted with another key.
        """
        row = yield Query(GET, {"tenant_id": tenant_id, "provider": provider})
        if row is None:
            raise NotFound(f"no setup stored for {provider!r}")
        value = self.box.decrypt_json(row[0])
        return SetupSummary(provider, sorted(value) if isinstance(value, dict) else [], row[1])


@operation
def configured(tenant_id: str) -> Steps[dict[str, datetime]]:
    """Providers this tenant has a setup for, with when it was stored (no decryption)."""
    rows = yield Query(CONFIGURED, {"tenant_id": tenant_id}, fetch="all")
    return dict(rows)


@operation
def delete(tenant_id: str, provider: str) -> Steps[None]:
    """Forget a setup.

    Raises:
        NotFound: none was stored.
    """
    if (yield Query(DELETE, {"tenant_id": tenant_id, "provider": provider}, fetch="rowcount")) == 0:
        raise NotFound(f"no setup stored for {provider!r}")
