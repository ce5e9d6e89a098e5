"""``api_call`` tools: an HTTP request defined over the API, filled from the call's arguments.

The definition's template decides where arguments may go (path segments, query, JSON body; see
:mod:`receipts.request_templates`); the request is sent with ``Idempotency-Key: <receipt id>``
through the guarded client (:mod:`workers.egress`). Output: ``{status_code, headers, json}`` for a
JSON answer, otherwise ``{status_code, headers, text, truncated}``; 4xx fails for good, 5xx, 429 and
timeouts are retryable (the executor retries only read or idempotent tools).

Credential headers are stored encrypted (:mod:`receipts.outbound.sealed_headers`): they are decrypted in
:meth:`ApiCallKind.send`, right before the request leaves, and exist in plain text nowhere else.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from receipts.db import Database
from receipts.errors import InvalidInput
from receipts.outbound import sealed_headers
from receipts.outbound import templates as request_templates
from receipts.records import Receipt
from receipts.secretbox import SecretKeyMissing, SecretUnreadable
from receipts.settings import Settings
from workers import egress
from workers.context import ToolContext
from workers.errors import InvalidArguments, ToolError
from workers.kinds.definitions import definition_of
from workers.runner import Invocation


def is_json(content_type: str) -> bool:
    return content_type == "application/json" or content_type.endswith("+json")


def output_of(fetched: egress.Fetched, max_bytes: int) -> dict[str, Any]:
    """The receipt output for an answer: parsed JSON when it is JSON and complete, else capped text."""
    data: dict[str, Any] = {"status_code": fetched.status_code, "headers": fetched.headers}
    if is_json(fetched.content_type) and not fetched.truncated and fetched.content:
        try:
            data["json"] = json.loads(fetched.content)
            return data
        except ValueError:
            pass
    data["text"] = fetched.text
    data["truncated"] = fetched.truncated
    if fetched.truncated:
        data["max_bytes"] = max_bytes  # the answer was longer: only its first max_bytes were read
    return data


class ApiCallKind:
    """Prepares api_call invocations: render the template now (bad arguments fail before any I/O)."""

    def __init__(self, db: Database, settings: Settings, clients: egress.Clients) -> None:
        self.db = db
        self.settings = settings
        self.clients = clients

    def prepare(self, receipt: Receipt, context: ToolContext) -> Invocation:
        spec = definition_of(self.db, receipt)
        try:
            template = request_templates.parse(spec.definition.get("request") or {})
        except InvalidInput as exc:
            raise ToolError(f"the tool's stored request is invalid: {exc.message}") from None
        arguments = receipt.input if isinstance(receipt.input, dict) else {}
        try:
            rendered = request_templates.render(template, arguments)
        except InvalidInput as exc:
            raise InvalidArguments(exc.message, details={"errors": exc.errors}) from None
        headers = {**rendered.headers, "Idempotency-Key": receipt.id}
        sealed = sealed_headers.token_of(spec.definition)  # None for a definition stored with plain headers
        timeout = min(template.timeout_s, context.timeout_s)
        return Invocation(self.send, {"rendered": rendered, "headers": headers, "timeout_s": timeout,
                                      "follow_redirects": template.follow_redirects,
                                      "sealed": sealed}, is_async=True)

    def _unseal(self, sealed: str | None) -> dict[str, str]:
        """The tool's credential headers in plain text (never logged, never put in the receipt)."""
        try:
            return sealed_headers.unseal(sealed, self.settings.secret_key)
        except SecretKeyMissing:
            raise ToolError("TOOLRELAY_SECRET_KEY is not set on this worker: the tool's credential headers "
                            "cannot be decrypted") from None
        except SecretUnreadable:
            raise ToolError("the tool's credential headers cannot be decrypted (TOOLRELAY_SECRET_KEY changed?): "
                            "define the tool again with PUT /v1/tools/{name}") from None

    async def send(self, rendered: request_templates.RenderedRequest, headers: dict[str, str], timeout_s: float,
                   follow_redirects: bool, sealed: str | None) -> dict[str, Any]:
        """Send the request, with the credential headers decrypted just now (``sealed`` holds their token)."""
        headers = {**headers, **self._unseal(sealed)}
        max_bytes = self.settings.http_max_bytes
        fetched = await egress.fetch(self.clients.get(), rendered.method, rendered.url, headers=headers,
                                     json=rendered.json, has_body=rendered.has_body, timeout_s=timeout_s,
                                     max_bytes=max_bytes, follow_redirects=follow_redirects,
                                     max_redirects=self.settings.outbound_max_redirects)
        failure = egress.failure_for(fetched, urlsplit(rendered.url).netloc)
        if failure is not None:
            raise failure
        return output_of(fetched, max_bytes)
