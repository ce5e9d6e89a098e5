"""``http``: fetch a web page's text, size-capped, through the SSRF guard (every redirect hop included)."""

from __future__ import annotations

from typing import Any

from workers import egress
from workers.errors import ToolError
from workers.integrations.base import Call, Method, Provider, Values, schema

BINARY = ("image/", "audio/", "video/", "font/", "application/octet-stream", "application/zip", "application/pdf",
          "application/gzip")


async def fetch(values: Values, call: Call) -> dict[str, Any]:
    limit = min(int(values.get("max_bytes") or call.settings.http_max_bytes), call.settings.http_max_bytes)
    fetched = await egress.fetch(call.clients.get(), "GET", values["url"], timeout_s=call.request_timeout(),
                                 max_bytes=limit, follow_redirects=True,
                                 max_redirects=call.settings.outbound_max_redirects)
    failure = egress.failure_for(fetched, values["url"])
    if failure is not None:
        raise failure
    if fetched.content_type.startswith(BINARY):
        raise ToolError(f"{fetched.url} is not text ({fetched.content_type})",
                        details={"content_type": fetched.content_type})
    return {"url": fetched.url, "status_code": fetched.status_code, "content_type": fetched.content_type,
            "text": fetched.text, "truncated": fetched.truncated, "max_bytes": limit}


PROVIDER = Provider(
    name="http",
    description="Fetch web pages as text (public addresses only, size-capped).",
    setup=schema({}),
    methods=(
        Method(
            name="fetch",
            description="Fetch a URL (http or https) and return its text, cut at max_bytes.",
            arguments=schema({
                "url": {"type": "string", "minLength": 8, "maxLength": 2048, "pattern": "^https?://"},
                "max_bytes": {"type": "integer", "minimum": 1, "description": "At most TOOLRELAY_HTTP_MAX_BYTES."},
            }, ["url"]),
            output=schema({"url": {"type": "string"}, "status_code": {"type": "integer"},
                           "content_type": {"type": "string"}, "text": {"type": "string"},
                           "truncated": {"type": "boolean"}, "max_bytes": {"type": "integer"}},
                          ["url", "status_code", "text", "truncated"]),
            run=fetch,
        ),
    ),
)
