"""Signatures that the standardwebhooks library verifies, one ``v1,`` entry per valid secret."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from receipts.secretbox import SecretBox
from receipts.webhooks.secrets import new_secret
from webhooks.signing import Signer

BOX = SecretBox("signing-tests")
BODY = '{"type":"receipt.succeeded","timestamp":"2026-11-29T12:00:00Z","data":{"id":"rcpt_1"}}'


def test_new_secrets_follow_standard_webhooks() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"))) == 32
    assert new_secret() != secret


def test_headers_verify_with_the_library_and_carry_the_receipt_id() -> None:
    secret = new_secret()
    headers = Signer(BOX.decrypt).headers("msg_1", "rcpt_1", BODY, [BOX.encrypt(secret)])
    assert headers["webhook-id"] == "msg_1" and headers["x-receipt-id"] == "rcpt_1"
    assert headers["webhook-timestamp"].isdigit()
    assert Webhook(secret).verify(BODY, headers) == {"type": "receipt.succeeded",
                                                    "timestamp": "2026-11-29T12:00:00Z", "data": {"id": "rcpt_1"}}


def test_the_signature_is_hmac_sha256_over_id_timestamp_and_body() -> None:
    secret = new_secret()
    headers = Signer(BOX.decrypt).headers("msg_1", "rcpt_1", BODY, [BOX.encrypt(secret)])
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = hmac.new(key, f"msg_1.{headers['webhook-timestamp']}.{BODY}".encode(), hashlib.sha256).digest()
    assert headers["webhook-signature"] == "v1," + base64.b64encode(expected).decode()


def test_two_secrets_give_two_signatures_each_valid_alone() -> None:
    old, new = new_secret(), new_secret()
    headers = Signer(BOX.decrypt).headers("msg_1", "rcpt_1", BODY, [BOX.encrypt(new), BOX.encrypt(old)])
    assert len(headers["webhook-signature"].split(" ")) == 2
    Webhook(old).verify(BODY, headers)
    Webhook(new).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(BODY, headers)


def test_a_tampered_body_or_a_stale_timestamp_does_not_verify() -> None:
    secret = new_secret()
    signer = Signer(BOX.decrypt)
    headers = signer.headers("msg_1", "rcpt_1", BODY, [BOX.encrypt(secret)])
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY.replace("rcpt_1", "rcpt_2"), headers)
    stale = signer.headers("msg_1", "rcpt_1", BODY, [BOX.encrypt(secret)],
                           now=datetime.now(UTC) - timedelta(minutes=10))
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY, stale)


def test_each_attempt_is_signed_with_its_own_timestamp() -> None:
    secret = BOX.encrypt(new_secret())
    signer = Signer(BOX.decrypt)
    now = datetime.now(UTC)
    first = signer.headers("msg_1", "rcpt_1", BODY, [secret], now=now)
    second = signer.headers("msg_1", "rcpt_1", BODY, [secret], now=now + timedelta(seconds=5))
    assert first["webhook-id"] == second["webhook-id"]
    assert first["webhook-timestamp"] != second["webhook-timestamp"]
    assert first["webhook-signature"] != second["webhook-signature"]
