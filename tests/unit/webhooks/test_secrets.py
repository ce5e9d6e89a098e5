"""The secret ring: encrypted at rest, rotation with a grace period."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from receipts.secretbox import SecretBox
from receipts.webhooks.secrets import first_ring, infos, rotate, tokens

BOX = SecretBox("ring-tests")
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_the_ring_stores_secrets_encrypted() -> None:
    ring, secret = first_ring(BOX, NOW)
    assert secret not in str(ring)
    assert [BOX.decrypt(token) for token in tokens(ring, NOW)] == [secret]


def test_rotation_keeps_the_previous_secret_for_the_grace_period() -> None:
    ring, old = first_ring(BOX, NOW)
    ring, new, expiry = rotate(ring, BOX, NOW + timedelta(seconds=1), grace_s=3600)
    assert expiry == NOW + timedelta(seconds=3601)
    assert [BOX.decrypt(t) for t in tokens(ring, NOW + timedelta(seconds=2))] == [new, old]
    assert [BOX.decrypt(t) for t in tokens(ring, expiry)] == [new]
    assert [i.expires_at for i in infos(ring, NOW + timedelta(seconds=2))] == [None, expiry]


def test_rotating_twice_drops_expired_secrets_and_never_extends_a_grace_period() -> None:
    ring, _ = first_ring(BOX, NOW)
    ring, second, first_expiry = rotate(ring, BOX, NOW, grace_s=60)
    ring, third, _ = rotate(ring, BOX, NOW + timedelta(seconds=10), grace_s=3600)
    assert len(tokens(ring, NOW + timedelta(seconds=11))) == 3
    later = NOW + timedelta(seconds=61)
    assert [BOX.decrypt(t) for t in tokens(ring, later)] == [third, second]
    ring, _, _ = rotate(ring, BOX, later, grace_s=3600)
    assert len(ring) == 3  # the first secret, expired, is gone
    assert first_expiry == NOW + timedelta(seconds=60)
