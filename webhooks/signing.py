"""Standard Webhooks signatures: ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` headers.

The signature is ``v1,`` + base64 HMAC-SHA256 of ``{id}.{timestamp}.{body}`` with each valid secret,
computed by the ``standardwebhooks`` library itself, so any receiver using it (or svix's) verifies
what we send. During a rotation's grace period the header carries one ``v1,`` entry per secret,
separated by spaces. Every attempt is signed afresh with its own timestamp; the id never changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from math import floor

from standardwebhooks import Webhook

USER_AGENT = "toolrelay-webhooks/0.1"
CACHE_SIZE = 4096


class Signer:
    """Signs bodies with stored secrets. ``decrypt`` turns a stored (encrypted) secret into ``whsec_...``."""

    def __init__(self, decrypt: Callable[[str], str]) -> None:
        self._decrypt = decrypt
        self._webhooks: dict[str, Webhook] = {}

    def _webhook(self, token: str) -> Webhook:
        webhook = self._webhooks.get(token)
        if webhook is None:
            if len(self._webhooks) >= CACHE_SIZE:
                self._webhooks.clear()
            webhook = self._webhooks[token] = Webhook(self._decrypt(token))
        return webhook

    def signature(self, message_id: str, timestamp: datetime, body: str, tokens: Sequence[str]) -> str:
        """The ``webhook-signature`` value: one ``v1,...`` entry per secret, space separated."""
        return " ".join(self._webhook(token).sign(message_id, timestamp, body) for token in tokens)

    def headers(self, message_id: str, receipt_id: str, body: str, tokens: Sequence[str],
                now: datetime | None = None) -> dict[str, str]:
        """Every header of one delivery attempt, signed at ``now``."""
        timestamp = (now or datetime.now(UTC)).astimezone(UTC)
        return {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "webhook-id": message_id,
            "webhook-timestamp": str(floor(timestamp.timestamp())),
            "webhook-signature": self.signature(message_id, timestamp, body, tokens),
            "x-receipt-id": receipt_id,
        }
