"""Tenants and their API keys. Keys are random, shown once, and stored only as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select

from receipts.db import Database, dialect_insert, utcnow
from receipts.ids import new_id
from receipts.records import Tenant
from receipts.tables import api_keys, tenants

KEY_PREFIX = "trk_"


def hash_key(key: str) -> str:
    # The key carries 256 random bits, so a plain hash is enough (no salt or slow KDF needed).
    return hashlib.sha256(key.encode()).hexdigest()


class Tenants:
    def __init__(self, db: Database) -> None:
        self.db = db

    def ensure(self, name: str) -> Tenant:
        """The tenant called ``name``, created if it does not exist yet."""
        with self.db.transaction() as conn:
            conn.execute(
                dialect_insert(conn)(tenants)
                .values(id=new_id("ten"), name=name, webhook_secrets=[], created_at=utcnow())
                .on_conflict_do_nothing(index_elements=["name"])
            )
            row = conn.execute(select(tenants.c.id, tenants.c.name).where(tenants.c.name == name)).one()
        return Tenant(id=row.id, name=row.name)

    def create_key(self, tenant_name: str, key: str | None = None) -> str:
        """Create an API key for ``tenant_name`` (creating the tenant too) and return it in clear."""
        tenant = self.ensure(tenant_name)
        key = key or KEY_PREFIX + secrets.token_urlsafe(32)
        with self.db.transaction() as conn:
            conn.execute(
                dialect_insert(conn)(api_keys)
                .values(id=new_id("key"), tenant_id=tenant.id, key_hash=hash_key(key), prefix=key[:8],
                        created_at=utcnow())
                .on_conflict_do_nothing(index_elements=["key_hash"])
            )
        return key

    def for_key(self, key: str) -> Tenant | None:
        """The tenant a (non-revoked) key belongs to, or None."""
        with self.db.read() as conn:
            row = conn.execute(
                select(tenants.c.id, tenants.c.name)
                .join(api_keys, api_keys.c.tenant_id == tenants.c.id)
                .where(api_keys.c.key_hash == hash_key(key), api_keys.c.revoked_at.is_(None))
            ).first()
        return Tenant(id=row.id, name=row.name) if row else None
