"""verify_webhook against signatures made by the standardwebhooks library itself."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook

from toolrelay.client import WebhookVerificationFailed, verify_webhook

SECRET = "whsec_" + base64.b64encode(b"a secret of thirty-two bytes ...").decode()
BODY = json.dumps({"type": "receipt.succeeded", "timestamp": "2026-11-29T19:30:03Z",
                   "data": {"id": "rcpt_1", "status": "success"}})


def signed(body: str = BODY, secret: str = SECRET, at: float | None = None) -> dict[str, str]:
    moment = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    return {"webhook-id": "msg_1", "webhook-timestamp": str(int(moment.timestamp())),
            "webhook-signature": Webhook(secret).sign("msg_1", moment, body), "X-Receipt-Id": "rcpt_1"}


def test_a_signed_webhook_gives_its_payload() -> None:
    payload = verify_webhook(SECRET, signed(), BODY.encode())
    assert payload["type"] == "receipt.succeeded" and payload["data"]["id"] == "rcpt_1"
    assert verify_webhook(SECRET, signed(), BODY) == payload  # str bodies too


def test_header_names_in_any_case() -> None:
    headers = {name.title(): value for name, value in signed().items()}
    assert verify_webhook(SECRET, headers, BODY)["data"]["status"] == "success"


def test_any_of_several_signatures_verifies_during_a_rotation() -> None:
    old = "whsec_" + base64.b64encode(b"the previous secret, rotated out").decode()
    headers = signed()
    headers["webhook-signature"] = f"{signed(secret=old)['webhook-signature']} {headers['webhook-signature']}"
    assert verify_webhook(SECRET, headers, BODY)["type"] == "receipt.succeeded"
    assert verify_webhook(old, headers, BODY)["type"] == "receipt.succeeded"


@pytest.mark.parametrize("tamper", ["body", "id", "secret", "stale", "missing", "malformed"])
def test_what_does_not_verify_is_refused(tamper: str) -> None:
    headers, body, secret = signed(), BODY, SECRET
    if tamper == "body":
        body = BODY.replace("success", "failed")
    elif tamper == "id":
        headers["webhook-id"] = "msg_2"
    elif tamper == "secret":
        secret = "whsec_" + base64.b64encode(b"somebody else's secret, 32 bytes").decode()
    elif tamper == "stale":
        headers = signed(at=time.time() - 600)  # a recording replayed ten minutes later
    elif tamper == "missing":
        del headers["webhook-signature"]
    else:
        headers["webhook-signature"] = "v1"
    with pytest.raises(WebhookVerificationFailed, match="does not verify"):
        verify_webhook(secret, headers, body)


def test_a_bad_secret_or_a_payload_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(WebhookVerificationFailed, match="secret"):
        verify_webhook("whsec_", signed(), BODY)
    with pytest.raises(WebhookVerificationFailed, match="not a JSON object"):
        verify_webhook(SECRET, signed(body="[1, 2]"), "[1, 2]")
