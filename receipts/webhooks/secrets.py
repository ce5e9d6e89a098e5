"""Webhook signing secrets: generation, and the ring of secrets an endpoint (or tenant) signs with.

A secret is ``whsec_`` + base64 of 32 random bytes (Standard Webhooks). It is stored encrypted with
the :class:`~receipts.secretbox.SecretBox` in a JSON list of entries::

    [{"secret": <Fernet token>, "created_at": ISO, "expires_at": ISO | null}, ...]

The entry without ``expires_at`` is the current secret. Rotation gives the current ones an expiry
(now + the grace period) and adds a new current secret; until that expiry every delivery carries one
``v1,`` signature per valid secret, so receivers that still know only the old secret keep verifying.
"""

from __future__ import annotations

import base64
import secrets
from datetime import datetime, timedelta
from typing import Any

from receipts.records import iso
from receipts.secretbox import SecretBox
from receipts.webhooks.records import SecretInfo

PREFIX = "whsec_"
SECRET_BYTES = 32  # Standard Webhooks asks for 24 to 64


def new_secret(nbytes: int = SECRET_BYTES) -> str:
    """A fresh ``whsec_...`` signing secret."""
    assert 24 <= nbytes <= 64, nbytes
    return PREFIX + base64.b64encode(secrets.token_bytes(nbytes)).decode()


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def valid(entries: list[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
    """The entries still in use at ``now``, newest first."""
    alive = [e for e in entries if (expiry := _parse(e.get("expires_at"))) is None or expiry > now]
    return sorted(alive, key=lambda e: e["created_at"], reverse=True)


def tokens(entries: list[dict[str, Any]], now: datetime) -> tuple[str, ...]:
    """The encrypted secrets to sign with at ``now``, newest first."""
    return tuple(e["secret"] for e in valid(entries, now))


def infos(entries: list[dict[str, Any]], now: datetime) -> list[SecretInfo]:
    """What the API may say about the valid secrets (never the secrets)."""
    return [SecretInfo(_parse(e["created_at"]), _parse(e.get("expires_at"))) for e in valid(entries, now)]  # type: ignore[arg-type]


def first_ring(box: SecretBox, now: datetime) -> tuple[list[dict[str, Any]], str]:
    """A ring holding one new secret; returns ``(entries, secret in clear)``."""
    secret = new_secret()
    return [{"secret": box.encrypt(secret), "created_at": iso(now), "expires_at": None}], secret


def rotate(entries: list[dict[str, Any]], box: SecretBox, now: datetime,
           grace_s: float) -> tuple[list[dict[str, Any]], str, datetime]:
    """Add a new current secret; the previous ones stay valid for ``grace_s`` (expired ones are dropped).

    Returns ``(entries, new secret in clear, when the previous secrets expire)``.
    """
    expiry = now + timedelta(seconds=grace_s)
    kept = []
    for entry in valid(entries, now):
        current_expiry = _parse(entry.get("expires_at"))
        if current_expiry is None or current_expiry > expiry:
            entry = {**entry, "expires_at": iso(expiry)}
        kept.append(entry)
    fresh, secret = first_ring(box, now)
    return fresh + kept, secret, expiry
