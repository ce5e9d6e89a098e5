"""A pure ASGI middleware at the door: bodies over the configured size get 413, and bodies sent
without a JSON content type (``curl -d`` sends form encoding) are read as the JSON they are."""

from __future__ import annotations

import json
from typing import Any

Scope = dict[str, Any]
FORM = b"application/x-www-form-urlencoded"
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class BodyTooLarge(BaseException):
    """Raised from ``receive``; a BaseException so the app's catch-all error handler lets it through."""


class BodyLimit:
    """Refuses bodies over ``max_bytes``: at once by Content-Length, or while they stream in."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)  # nothing to limit: no wrapping on the hot read path
            return
        headers = scope.get("headers", [])
        for name, value in headers:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await self._refuse(send)
                return
        content_type = next((value for name, value in headers if name == b"content-type"), None)
        if content_type in (None, FORM):
            scope = {**scope, "headers": [(n, v) for n, v in headers if n != b"content-type"]
                     + [(b"content-type", b"application/json")]}
        seen = 0
        response_started = False

        async def limited_receive() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Any) -> None:
            nonlocal response_started
            response_started = response_started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not response_started:
                await self._refuse(send)

    async def _refuse(self, send: Any) -> None:
        body = json.dumps({
            "type": "about:blank", "title": "Content Too Large", "status": 413,
            "detail": f"the request body is larger than {self.max_bytes} bytes",
        }).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/problem+json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
