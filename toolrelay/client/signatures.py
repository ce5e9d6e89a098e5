"""Verifying toolrelay's webhooks: Standard Webhooks signatures, checked by the ``standardwebhooks`` library.

toolrelay signs every delivery attempt with ``webhook-id``, ``webhook-timestamp`` and
``webhook-signature`` headers (``v1,`` + base64 HMAC-SHA256 of ``{id}.{timestamp}.{body}``; one entry
per secret during a rotation). The library refuses a timestamp more than five minutes away, which is
what stops a recorded delivery from being replayed later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import EmptyWebhookSecretError, WebhookVerificationError

from toolrelay.client.errors import WebhookVerificationFailed


def verify_webhook(secret: str, headers: Mapping[str, str], body: bytes | str) -> dict[str, Any]:
    """Check a webhook's signature and return its payload, ``{"type", "timestamp", "data"}``.

    Args:
        secret: the endpoint's ``whsec_...`` secret (or the tenant's default secret, for a ``webhook_url``).
        headers: the request's headers, in any case (a dict, or a framework's header mapping).
        body: the raw body exactly as received: verify before parsing or re-encoding anything.

    Raises:
        WebhookVerificationFailed: a header missing, a timestamp out of range, no signature matching the
            body, or a payload that is not a JSON object.
    """
    try:
        webhook = Webhook(secret)
    except (EmptyWebhookSecretError, ValueError) as exc:  # binascii.Error is a ValueError
        raise WebhookVerificationFailed("the secret is not a whsec_ signing secret") from exc
    try:
        payload = webhook.verify(body, {name.lower(): value for name, value in headers.items()})
    except WebhookVerificationError as exc:
        raise WebhookVerificationFailed(f"the webhook does not verify: {exc}") from exc
    except ValueError as exc:  # a malformed signature entry, a body not UTF-8 or not JSON
        raise WebhookVerificationFailed(f"the webhook does not verify: {exc}") from exc
    if not isinstance(payload, dict):
        raise WebhookVerificationFailed("the webhook's payload is not a JSON object")
    return payload
