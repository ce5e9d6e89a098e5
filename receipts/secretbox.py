"""Encryption at rest for secrets toolrelay must be able to read back (webhook secrets, integration setup).

Fernet (AES-128-CBC + HMAC-SHA256) with a key derived from ``TOOLRELAY_SECRET_KEY``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

from receipts.errors import ReceiptsError


class SecretKeyMissing(ReceiptsError):
    """TOOLRELAY_SECRET_KEY is not set: toolrelay cannot store secrets without it."""


class SecretUnreadable(ReceiptsError):
    """A stored secret cannot be decrypted: was TOOLRELAY_SECRET_KEY changed?"""


class SecretBox:
    def __init__(self, secret_key: str) -> None:
        if not secret_key:
            raise SecretKeyMissing()
        digest = hashlib.sha256(secret_key.encode()).digest()
        self._fernet = Fernet(base64.urlsafe_b64encode(digest))

    def encrypt(self, plaintext: str) -> str:
        return self._fernet.encrypt(plaintext.encode()).decode()

    def decrypt(self, token: str) -> str:
        try:
            return self._fernet.decrypt(token.encode()).decode()
        except InvalidToken as exc:
            raise SecretUnreadable() from exc

    def encrypt_json(self, value: Any) -> str:
        return self.encrypt(json.dumps(value))

    def decrypt_json(self, token: str) -> Any:
        return json.loads(self.decrypt(token))
