"""The credential headers of ``api_call`` tools, encrypted at rest.

**Which headers.** Those whose name matches :data:`~receipts.request_templates.SENSITIVE_HEADER`
(``auth``, ``token``, ``secret``, ``key``, ``password``, ``cookie``, ``session``, ``credential``,
``signature``: ``Authorization``, ``Cookie``, ``X-Api-Key``, ``X-Auth-Token``...). It is the rule the
API already masks by, so every value the API hides is also encrypted in the database, and every value
it shows (``Accept``, ``Content-Type``, ``User-Agent``) stays plain. Encrypting those too would protect
nothing (``GET /v1/tools`` returns them) and would make every api_call definition, even one without
credentials, fail when ``TOOLRELAY_SECRET_KEY`` is not set.

**Stored form.** ``tools.definition`` is::

    {"request": {..., "headers": {"Authorization": "********", "Accept": "application/json"}},
     "sealed_headers": "<Fernet token of {\"Authorization\": \"Bearer ...\"}>"}

The request keeps each secret header in place, masked, so the header order and the public view do not
change and :func:`~receipts.request_templates.parse` reads the stored request as before; the values sit
beside it in one token (:class:`~receipts.secretbox.SecretBox`, key from ``TOOLRELAY_SECRET_KEY``). A
definition stored before headers were sealed (plain values, no ``sealed_headers``) is sent as stored.

The gateway seals when a tool is defined; the worker unseals right before it sends the request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from receipts.outbound.templates import MASK, SEALED_HEADERS, SENSITIVE_HEADER, TemplateError
from receipts.secretbox import SecretBox


def is_secret(name: str) -> bool:
    """Whether the header ``name`` carries a credential (encrypted at rest, masked by the API)."""
    return SENSITIVE_HEADER.search(name) is not None


def seal(request: Mapping[str, Any], secret_key: str, *, prefix: str = "request") -> dict[str, Any]:
    """The definition to store for a parsed request (``RequestTemplate.to_definition()``).

    The key is needed only when the request has a credential header.

    Raises:
        TemplateError: a credential header's value is the mask (``********``, as GET shows it), not a value.
        SecretKeyMissing: a credential header must be stored and ``TOOLRELAY_SECRET_KEY`` is not set.
    """
    headers: Mapping[str, str] = request.get("headers") or {}
    secrets = {name: value for name, value in headers.items() if is_secret(name)}
    if not secrets:
        return {"request": dict(request)}
    for name, value in secrets.items():
        if value == MASK:
            field = f"{prefix}.headers.{name}"
            message = f"{MASK} is how the API shows this credential; send its real value"
            raise TemplateError(f"invalid {field}: {message}", errors=[{"field": field, "message": message}])
    token = SecretBox(secret_key).encrypt_json(secrets)
    masked = {name: (MASK if name in secrets else value) for name, value in headers.items()}
    return {"request": {**request, "headers": masked}, SEALED_HEADERS: token}


def token_of(definition: Mapping[str, Any]) -> str | None:
    """The sealed credential headers of a stored definition; ``None`` when it has none (or stored them plain)."""
    token = definition.get(SEALED_HEADERS)
    return str(token) if token else None


def unseal(token: str | None, secret_key: str) -> dict[str, str]:
    """The credential headers in ``token`` (from :func:`token_of`), decrypted; ``{}`` for ``None``.

    Raises:
        SecretKeyMissing: ``TOOLRELAY_SECRET_KEY`` is not set.
        SecretUnreadable: they were sealed with another key.
    """
    if token is None:
        return {}
    values = SecretBox(secret_key).decrypt_json(token)
    return {str(name): str(value) for name, value in dict(values).items()}
