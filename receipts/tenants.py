"""Tenants and their API keys. Keys are random, shown once, and stored only as SHA-256 hashes.

A key may be scoped: to some tools (it sees and calls only those), to reading (it changes
nothing), to a lifetime (``expires_at``, the database's clock). A revoked or expired key is refused.
When a key was last used is recorded when a gateway looks it up (:func:`check`), at most once a
minute per key, in the lookup's own statement: gateways cache lookups for ``TOOLRELAY_AUTH_CACHE_S``,
so no request pays a write for it.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from receipts.catalogue.tools import TOOL_NAME
from receipts.db import Query, Steps, operation, transaction
from receipts.errors import InvalidInput
from receipts.ids import new_id
from receipts.records import KEY_INFO_COLUMNS, Caller, KeyInfo, Tenant

KEY_PREFIX = "trk_"
# Last use is written when it is older than this (a lookup of a key used since is a pure read).
LAST_USE_RESOLUTION_S = 60

ENSURE = """
WITH new AS (
    INSERT INTO tenants (id, name, webhook_secrets, created_at) VALUES (%(id)s, %(name)s, '[]', now())
    ON CONFLICT (name) DO NOTHING RETURNING id, name
)
SELECT id, name FROM new UNION ALL SELECT id, name FROM tenants WHERE name = %(name)s LIMIT 1"""
ADD_KEY = """
INSERT INTO api_keys (id, tenant_id, key_hash, prefix, created_at, tools, read_only, expires_at)
VALUES (%(id)s, %(tenant_id)s, %(hash)s, %(prefix)s, now(), %(tools)s, %(read_only)s,
        now() + make_interval(secs => %(expires_in_s)s))
ON CONFLICT (key_hash) DO NOTHING"""
# A key as an operator sees it; ``k`` is api_keys, ``t`` its tenant.
INFO = """k.id, k.tenant_id, t.name, k.prefix, k.tools, k.read_only, k.expires_at, k.created_at, k.last_used_at,
          k.revoked_at, coalesce(k.expires_at <= now(), false)"""
# The key, with how long it has left (seconds, database time) and why it is refused, if it is.
LOOKUP = """
SELECT k.id, k.tenant_id, t.name, k.tools, k.read_only,
       extract(epoch FROM k.expires_at - now())::float8 AS valid_for_s,
       CASE WHEN k.revoked_at IS NOT NULL THEN 'revoked' WHEN k.expires_at <= now() THEN 'expired' END AS refused,
       k.last_used_at
FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
WHERE k.key_hash = %(hash)s"""
CHECK = f"""
WITH k AS ({LOOKUP}),
touched AS (
    UPDATE api_keys SET last_used_at = now()
    FROM k WHERE api_keys.id = k.id AND k.refused IS NULL
      AND (k.last_used_at IS NULL OR k.last_used_at < now() - make_interval(secs => {LAST_USE_RESOLUTION_S}))
    RETURNING 1
)
SELECT * FROM k"""
LIST = f"""
SELECT {INFO} FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
WHERE %(tenant)s::text IS NULL OR t.name = %(tenant)s
ORDER BY t.name, k.created_at, k.id"""
REVOKE = f"""
WITH old AS (
    SELECT id, revoked_at FROM api_keys WHERE id = %(id)s OR key_hash = %(hash)s FOR UPDATE
), changed AS (
    UPDATE api_keys SET revoked_at = coalesce(api_keys.revoked_at, now())
    FROM old WHERE api_keys.id = old.id
    RETURNING api_keys.*
)
SELECT {INFO}, old.revoked_at IS NULL FROM changed k JOIN old ON old.id = k.id JOIN tenants t ON t.id = k.tenant_id"""

assert KEY_INFO_COLUMNS[-1] == "expired"


@dataclass(frozen=True, slots=True)
class KeyCheck:
    """What a presented key is worth: its caller, or why it is refused (``unknown``, ``revoked``,
    ``expired``), and for how many more seconds it is valid (None: it does not expire)."""

    caller: Caller | None
    refused: str | None = None
    valid_for_s: float | None = None


def hash_key(key: str) -> str:
    # The key carries 256 random bits, so a plain hash is enough (no salt or slow KDF needed).
    return hashlib.sha256(key.encode()).hexdigest()


def check_tools(tools: Sequence[str] | None) -> list[str] | None:
    """A key's tool scope as stored: distinct valid tool names, sorted (None: every tool).

    Raises:
        InvalidInput: a name that cannot be a tool's, or an empty list (a key for no tool at all).
    """
    if tools is None:
        return None
    names = sorted({name.strip() for name in tools if name.strip()})
    bad = [name for name in names if not TOOL_NAME.match(name)]
    if bad or not names:
        message = f"not tool names: {', '.join(bad)}" if bad else "name at least one tool"
        raise InvalidInput(message, errors=[{"field": "tools", "message": message}])
    return names


@operation
def ensure(name: str) -> Steps[Tenant]:
    """The tenant called ``name``, created if it does not exist yet."""
    row = yield Query(ENSURE, {"id": new_id("ten"), "name": name})
    if row is None:  # created by a concurrent statement that committed after this one's snapshot
        row = yield Query("SELECT id, name FROM tenants WHERE name = %(name)s", {"name": name})
    return Tenant(id=row[0], name=row[1])


@transaction
def issue(tenant_name: str, *, tools: Sequence[str] | None = None, read_only: bool = False,
          expires_in_s: float | None = None, key: str | None = None) -> Steps[tuple[str, KeyInfo]]:
    """Create an API key for ``tenant_name`` (creating the tenant too): ``(the key in clear, its info)``.

    Raises:
        InvalidInput: ``tools`` names something that cannot be a tool, or ``expires_in_s`` is not positive.
    """
    scope = check_tools(tools)
    if expires_in_s is not None and expires_in_s <= 0:
        raise InvalidInput("the expiry must be in the future",
                           errors=[{"field": "expires_in", "message": "must be positive"}])
    tenant = yield from ensure(tenant_name).steps
    key = key or KEY_PREFIX + secrets.token_urlsafe(32)
    key_id = new_id("key")
    yield Query(ADD_KEY, {"id": key_id, "tenant_id": tenant.id, "hash": hash_key(key), "prefix": key[:8],
                          "tools": scope, "read_only": read_only, "expires_in_s": expires_in_s}, fetch="none")
    row = yield Query(f"SELECT {INFO} FROM api_keys k JOIN tenants t ON t.id = k.tenant_id "
                      "WHERE k.key_hash = %(hash)s", {"hash": hash_key(key)})
    return key, KeyInfo(*row)


@transaction
def create_key(tenant_name: str, key: str | None = None, *, tools: Sequence[str] | None = None,
               read_only: bool = False, expires_in_s: float | None = None) -> Steps[str]:
    """Create an API key for ``tenant_name`` (creating the tenant too) and return it in clear (see :func:`issue`)."""
    created, _ = yield from issue(tenant_name, key=key, tools=tools, read_only=read_only,
                                  expires_in_s=expires_in_s).steps
    return created


def _check(row: tuple[Any, ...] | None) -> KeyCheck:
    if row is None:
        return KeyCheck(None, "unknown")
    key_id, tenant_id, tenant_name, tools, read_only, valid_for_s, refused, _ = row
    if refused is not None:
        return KeyCheck(None, refused)
    caller = Caller(Tenant(tenant_id, tenant_name), key_id, frozenset(tools) if tools is not None else None,
                    read_only)
    return KeyCheck(caller, None, valid_for_s)


@operation
def check(key: str) -> Steps[KeyCheck]:
    """What ``key`` is worth, noting its use (at most once a minute): for the gateway's key cache."""
    return _check((yield Query(CHECK, {"hash": hash_key(key)})))


@operation
def for_key(key: str) -> Steps[Tenant | None]:
    """The tenant a valid (neither revoked nor expired) key belongs to, or None. A pure read."""
    found = _check((yield Query(LOOKUP, {"hash": hash_key(key)})))
    return found.caller.tenant if found.caller is not None else None


@operation
def list_keys(tenant_name: str | None = None) -> Steps[list[KeyInfo]]:
    """Every key (of ``tenant_name``, or of every tenant), oldest first within each tenant."""
    rows = yield Query(LIST, {"tenant": tenant_name}, fetch="all")
    return [KeyInfo(*row) for row in rows]


@transaction
def revoke(key_id_or_key: str) -> Steps[tuple[KeyInfo, bool] | None]:
    """Revoke a key, named by its id or by the key itself: ``(its info, whether this revoked it)``,
    or None when there is no such key. Revoking a revoked key changes nothing."""
    row = yield Query(REVOKE, {"id": key_id_or_key, "hash": hash_key(key_id_or_key)})
    if row is None:
        return None
    return KeyInfo(*row[:-1]), bool(row[-1])
