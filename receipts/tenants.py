"""Tenants and their API keys. Keys are random, shown once, and stored only as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import secrets

from receipts.db import Query, Steps, operation
from receipts.ids import new_id
from receipts.records import Tenant

KEY_PREFIX = "trk_"

ENSURE = """
WITH new AS (
    INSERT INTO tenants (id, name, webhook_secrets, created_at) VALUES (%(id)s, %(name)s, '[]', now())
    ON CONFLICT (name) DO NOTHING RETURNING id, name
)
SELECT id, name FROM new UNION ALL SELECT id, name FROM tenants WHERE name = %(name)s LIMIT 1"""
ADD_KEY = """
INSERT INTO api_keys (id, tenant_id, key_hash, prefix, created_at)
VALUES (%(id)s, %(tenant_id)s, %(hash)s, %(prefix)s, now())
ON CONFLICT (key_hash) DO NOTHING"""
FOR_KEY = """
SELECT t.id, t.name FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
WHERE k.key_hash = %(hash)s AND k.revoked_at IS NULL"""


def hash_key(key: str) -> str:
    # The key carries 256 random bits, so a plain hash is enough (no salt or slow KDF needed).
    return hashlib.sha256(key.encode()).hexdigest()


@operation
def ensure(name: str) -> Steps[Tenant]:
    """The tenant called ``name``, created if it does not exist yet."""
    row = yield Query(ENSURE, {"id": new_id("ten"), "name": name})
    if row is None:  # created by a concurrent statement that committed after this one's snapshot
        row = yield Query("SELECT id, name FROM tenants WHERE name = %(name)s", {"name": name})
    return Tenant(id=row[0], name=row[1])


@operation
def create_key(tenant_name: str, key: str | None = None) -> Steps[str]:
    """Create an API key for ``tenant_name`` (creating the tenant too) and return it in clear."""
    tenant = yield from ensure(tenant_name).steps
    key = key or KEY_PREFIX + secrets.token_urlsafe(32)
    yield Query(ADD_KEY, {"id": new_id("key"), "tenant_id": tenant.id, "hash": hash_key(key), "prefix": key[:8]},
                fetch="none")
    return key


@operation
def for_key(key: str) -> Steps[Tenant | None]:
    """The tenant a (non-revoked) key belongs to, or None."""
    row = yield Query(FOR_KEY, {"hash": hash_key(key)})
    return Tenant(id=row[0], name=row[1]) if row else None
