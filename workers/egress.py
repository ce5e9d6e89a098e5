"""Outbound HTTP for api_call tools and integrations: SSRF-guarded, size-capped, errors mapped on entry.

The SSRF guard runs where it cannot be raced: the clients here send on a
:class:`~workers.guarded_transport.GuardedTransport`, whose pool connects only to addresses the guard
checked at connect time (the first request, each redirect hop, a reconnect), so a DNS answer that
changes between a check and a connect (rebinding) cannot slip through. Environment proxies are
ignored for the same reason (``trust_env=False``).

Bodies are streamed and capped at ``max_bytes`` (a 50 MB answer never sits in memory); redirects are
followed by hand, a hop at a time, and credentials defined for one origin are not sent to another.

Every request carries the trace context of the attempt it is made for (``traceparent``, see
:mod:`receipts.telemetry.tracing`), and with tracing on each is a client span (OpenTelemetry's httpx
instrumentation wraps the transport). Whatever speaks HTTP for a tool goes through here, a model
client for agent runs included: take its ``httpx.AsyncClient`` from :class:`Clients` and its requests
are traced and guarded like the rest.

Third-party errors are mapped here, where they enter::

    httpx.TimeoutException   -> ToolTimeout     (retryable)
    httpx.TransportError     -> UpstreamError   (retryable: connection refused, reset, ...)
    HTTP 429, 408, 5xx       -> UpstreamError   (retryable, retry_after_ms from Retry-After)
    HTTP other 4xx           -> UpstreamError   (retryable=False)
    non-public address       -> Forbidden
"""

from __future__ import annotations

import asyncio
import email.utils
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import httpx2

from receipts.outbound.guard import OutboundGuard
from receipts.telemetry import tracing
from workers.errors import Forbidden, ToolFailure, ToolTimeout, UpstreamError
from workers.guarded_transport import GuardedTransport

REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_RETRY_AFTER_MS = 24 * 3600 * 1000
EXCERPT_BYTES = 1024
USER_AGENT = "toolrelay/0.1"


def traced(transport: httpx.AsyncBaseTransport) -> httpx.AsyncBaseTransport:
    """``transport``, with a client span for each request when tracing is on (left as it is when off)."""
    if not tracing.active():
        return transport
    from opentelemetry.instrumentation.httpx import AsyncOpenTelemetryTransport

    return AsyncOpenTelemetryTransport(transport)


def traced2(transport: httpx2.AsyncBaseTransport) -> httpx2.AsyncBaseTransport:
    """:func:`traced` for httpx2 (the HTTP client of the ``mcp`` and ``openai`` SDKs)."""
    if not tracing.active():
        return transport
    from opentelemetry.instrumentation.httpx import AsyncOpenTelemetryTransportHttpx2

    return AsyncOpenTelemetryTransportHttpx2(transport)  # type: ignore[arg-type]  # the stubs name httpx's base


def guarded_client(guard: OutboundGuard, **kwargs: Any) -> httpx.AsyncClient:
    """An httpx client on a guarded transport that never follows redirects or env proxies by itself."""
    return httpx.AsyncClient(transport=traced(GuardedTransport(guard)), trust_env=False, follow_redirects=False,
                             headers={"User-Agent": USER_AGENT}, **kwargs)


class Clients:
    """One pooled client per event loop (the worker's tool loop), made on first use.

    Guarded unless ``guard`` is None, which is only for the operator's own configured base URLs.
    """

    def __init__(self, guard: OutboundGuard | None) -> None:
        self.guard = guard
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary())

    def get(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            client = self._clients[loop] = (
                guarded_client(self.guard) if self.guard is not None
                else httpx.AsyncClient(transport=traced(httpx.AsyncHTTPTransport(trust_env=False, retries=0)),
                                       trust_env=False, follow_redirects=False, headers={"User-Agent": USER_AGENT}))
        return client


# -- answers ------------------------------------------------------------------------------------


def retry_after_ms(value: str | None, now: float | None = None) -> int | None:
    """``Retry-After`` (seconds or an HTTP date) in milliseconds, or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(int(value) * 1000, MAX_RETRY_AFTER_MS)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    delay = when.timestamp() - (now if now is not None else time.time())
    return min(max(0, int(delay * 1000)), MAX_RETRY_AFTER_MS)


@dataclass(frozen=True, slots=True)
class Fetched:
    """A response, read up to the cap."""

    url: str
    status_code: int
    headers: dict[str, str]
    content: bytes
    truncated: bool
    encoding: str | None

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()

    @property
    def text(self) -> str:
        return self.content.decode(self.encoding or "utf-8", errors="replace")

    def excerpt(self) -> str:
        return self.content[:EXCERPT_BYTES].decode(self.encoding or "utf-8", errors="replace")


def failure_for(fetched: Fetched, what: str) -> ToolFailure | None:
    """The error for a non-2xx/3xx answer: 429/408/5xx are retryable (Retry-After honoured), other 4xx not."""
    status = fetched.status_code
    if status < 400:
        return None
    details = {"status_code": status, "url": fetched.url, "body": fetched.excerpt()}
    message = f"{what} answered HTTP {status}"
    if status in (408, 429) or status >= 500:
        return UpstreamError(message, retry_after_ms=retry_after_ms(fetched.headers.get("retry-after")),
                             details=details)
    return UpstreamError(message, retryable=False, details=details)


async def read_capped(response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    """At most ``max_bytes`` of the (decoded) body, and whether there was more. Stops reading at the cap."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        if size + len(chunk) > max_bytes:
            chunks.append(chunk[: max_bytes - size])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


def flat_headers(headers: httpx.Headers) -> dict[str, str]:
    """Lower-cased names; repeated headers joined with ", " (as HTTP allows)."""
    flat: dict[str, str] = {}
    for name, value in headers.multi_items():
        name = name.lower()
        flat[name] = f"{flat[name]}, {value}" if name in flat else value
    return flat


def _same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.hostname, pa.port) == (pb.scheme, pb.hostname, pb.port)


async def fetch(client: httpx.AsyncClient, method: str, url: str, *, headers: Mapping[str, str] | None = None,
                json: Any = None, has_body: bool = False, timeout_s: float, max_bytes: int,
                follow_redirects: bool = False, max_redirects: int = 5) -> Fetched:
    """Send one request (following redirects by hand if asked) and read the answer up to ``max_bytes``.

    Raises:
        Forbidden: a hop reaches a non-public address or leaves http(s).
        ToolTimeout: the upstream did not answer in ``timeout_s``.
        UpstreamError: the connection failed, or too many redirects.
    """
    origin = url
    sent_headers = dict(headers or {})
    for _hop in range(max_redirects + 1):
        hop_headers = dict(sent_headers)
        tracing.inject(hop_headers)  # the attempt's trace context (the client span's, when tracing is on)
        request = client.build_request(method, url, headers=hop_headers, json=json if has_body else None,
                                       timeout=httpx.Timeout(timeout_s))
        try:
            response = await client.send(request, stream=True)
            try:
                location = response.headers.get("location")
                if follow_redirects and response.status_code in REDIRECTS and location:
                    next_url = str(response.url.join(location))
                    if urlsplit(next_url).scheme not in ("http", "https"):
                        raise Forbidden(f"redirect to a non-http(s) URL refused: {next_url}")
                    if response.status_code == 303 or (response.status_code in (301, 302) and method == "POST"):
                        method, has_body, json = ("GET" if method != "HEAD" else "HEAD"), False, None
                    if not _same_origin(origin, next_url):
                        # Headers defined for one origin (credentials) are not handed to another.
                        sent_headers = {k: v for k, v in sent_headers.items() if k.lower() == "idempotency-key"}
                    url = next_url
                    continue
                content, truncated = await read_capped(response, max_bytes)
            finally:
                await response.aclose()
        except httpx.TimeoutException as exc:
            raise ToolTimeout(f"{urlsplit(url).hostname} did not answer within {timeout_s:g} s "
                              f"({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise UpstreamError(f"request to {urlsplit(url).hostname} failed: {type(exc).__name__}: {exc}") from None
        return Fetched(url=str(response.url), status_code=response.status_code,
                       headers=flat_headers(response.headers), content=content,
                       truncated=truncated, encoding=response.charset_encoding)
    raise UpstreamError(f"more than {max_redirects} redirects", retryable=False, details={"url": url})
