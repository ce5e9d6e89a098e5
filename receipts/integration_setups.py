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

from sqlalchemy import delete, select

from receipts.db import Database, dialect_insert, utcnow
from receipts.errors import NotFound
from receipts.secretbox import SecretBox
from receipts.tables import integration_setups


@dataclass(frozen=True, slots=True)
class SetupSummary:
    """What the API may show of a stored setup: the names of the fields that are set."""

    provider: str
    fields: list[str]
    updated_at: datetime

    def to_api(self) -> dict[str, Any]:
        return {"provider": self.provider, "configured": True, "fields_set": self.fields,
                "updated_at": self.updated_at.isoformat().replace("+00:00", "Z")}


class IntegrationSetups:
    """Encrypted setups by (tenant, provider). ``box`` is built on first use (it needs the secret key)."""

    def __init__(self, db: Database, box: SecretBox | Callable[[], SecretBox]) -> None:
        self.db = db
        self._box = box

    @property
    def box(self) -> SecretBox:
        if not isinstance(self._box, SecretBox):
            self._box = self._box()  # raises SecretKeyMissing when TOOLRELAY_SECRET_KEY is unset
        return self._box

    def put(self, tenant_id: str, provider: str, config: dict[str, Any]) -> SetupSummary:
        """Store (replace) a tenant's setup of ``provider``."""
        token = self.box.encrypt_json(config)
        now = utcnow()
        with self.db.transaction() as conn:
            stmt = dialect_insert(conn)(integration_setups).values(
                tenant_id=tenant_id, provider=provider, config=token, updated_at=now)
            conn.execute(stmt.on_conflict_do_update(index_elements=["tenant_id", "provider"],
                                                    set_={"config": token, "updated_at": now}))
        return SetupSummary(provider, sorted(config), now)

    def _row(self, tenant_id: str, provider: str) -> Any:
        with self.db.read() as conn:
            return conn.execute(select(integration_setups).where(
                integration_setups.c.tenant_id == tenant_id, integration_setups.c.provider == provider)).first()

    def get(self, tenant_id: str, provider: str) -> dict[str, Any] | None:
        """The decrypted setup, or None when the tenant stored none.

        Raises:
            SecretUnreadable: it was encrypted with another key.
        """
        row = self._row(tenant_id, provider)
        if row is None:
            return None
        value = self.box.decrypt_json(row.config)
        return value if isinstance(value, dict) else {}

    def summary(self, tenant_id: str, provider: str) -> SetupSummary:
        """Which fields are set.

        Raises:
            NotFound: no setup stored for this provider.
            SecretUnreadable: it was encrypted with another key.
        """
        row = self._row(tenant_id, provider)
        if row is None:
            raise NotFound(f"no setup stored for {provider!r}")
        value = self.box.decrypt_json(row.config)
        return SetupSummary(provider, sorted(value) if isinstance(value, dict) else [], row.updated_at)

    def configured(self, tenant_id: str) -> dict[str, datetime]:
        """Providers this tenant has a setup for, with when it was stored (no decryption)."""
        with self.db.read() as conn:
            rows = conn.execute(select(integration_setups.c.provider, integration_setups.c.updated_at).where(
                integration_setups.c.tenant_id == tenant_id)).all()
        return {row.provider: row.updated_at for row in rows}

    def delete(self, tenant_id: str, provider: str) -> None:
        """Forget a setup.

        Raises:
            NotFound: none was stored.
        """
        with self.db.transaction() as conn:
            result = conn.execute(delete(integration_setups).where(
                integration_setups.c.tenant_id == tenant_id, integration_setups.c.provider == provider))
        if result.rowcount == 0:
            raise NotFound(f"no setup stored for {provider!r}")
