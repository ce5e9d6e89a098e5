"""The HTTP side of a delivery: one aiohttp session, guarded against SSRF, that turns a POST into an Outcome.

aiohttp, not httpx's own pool: at concurrency 32 on this kind of machine aiohttp posts ~9,500
requests/s and httpx's pool ~550/s (DESIGN.md), and the dispatcher's throughput is mostly this.

The SSRF guard runs where the address is chosen: a resolver that refuses any answer outside the
public internet (unless allow-listed) sits inside the connector, so the address checked is the
address connected to, at delivery time, whatever DNS said at registration. IP literals bypass
resolvers in aiohttp and are checked before the request. Redirects are never followed.

With tracing on, each POST is a client span (OpenTelemetry's aiohttp-client instrumentation, as a
trace config of the session); off, the session has no trace config and pays nothing for it.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from datetime import UTC, datetime
from types import TracebackType

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from receipts.outbound.guard import OutboundGuard
from receipts.telemetry import tracing
from webhooks.errors import AddressRefused
from webhooks.policy import Outcome, parse_retry_after

RESPONSE_KEEP_BYTES = 1024  # the attempts log keeps the first 1 KiB of each response


class GuardedResolver(AbstractResolver):
    """Resolves with the system resolver, then refuses addresses the guard does not allow."""

    def __init__(self, guard: OutboundGuard) -> None:
        self.guard = guard
        self._inner = aiohttp.ThreadedResolver()

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        refused = sorted({r["host"] for r in results if not self.guard.address_allowed(_address(r["host"]))})
        if refused:
            raise AddressRefused(f"{host} resolves to a non-public address ({', '.join(refused)}) that is not "
                                 "allow-listed in TOOLRELAY_OUTBOUND_ALLOW_CIDRS")
        return results

    async def close(self) -> None:
        await self._inner.close()


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(host.split("%", 1)[0])


def _refused_by(exc: BaseException) -> AddressRefused | None:
    """The AddressRefused at the root of an aiohttp connection error, if that is what it was."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, AddressRefused):
            return seen
        seen = getattr(seen, "os_error", None) or seen.__cause__
    return None


class Transport:
    """Posts signed bodies. Use as ``async with Transport(...) as transport`` inside one event loop."""

    def __init__(self, guard: OutboundGuard, *, timeout_s: float, connections: int) -> None:
        self.guard = guard
        self.timeout_s = timeout_s
        self.connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._prechecked: dict[str, str | None] = {}  # the verdict on a URL string never changes

    async def __aenter__(self) -> Transport:
        connector = aiohttp.TCPConnector(limit=self.connections, resolver=GuardedResolver(self.guard),
                                         ttl_dns_cache=10)
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                              timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                                              trace_configs=_trace_configs())
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _precheck(self, url: str) -> str | None:
        """Why ``url`` cannot be requested at all (scheme, host, an IP literal refused), or None."""
        if url in self._prechecked:
            return self._prechecked[url]
        if len(self._prechecked) > 10_000:
            self._prechecked.clear()
        verdict = self._prechecked[url] = self._judge(url)
        return verdict

    def _judge(self, url: str) -> str | None:
        try:
            parsed = URL(url)
        except (ValueError, TypeError):
            return "not sent: invalid URL"
        if parsed.scheme not in ("http", "https") or not parsed.host:
            return "not sent: the URL must be http(s) with a host"
        try:
            literal = _address(parsed.host)
        except ValueError:
            return None  # a name: the resolver checks what it resolves to
        if not self.guard.address_allowed(literal):
            return (f"not sent: {literal} is a non-public address that is not allow-listed in "
                    "TOOLRELAY_OUTBOUND_ALLOW_CIDRS")
        return None

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> Outcome:
        """POST ``body`` to ``url``; every failure becomes an Outcome, none is raised."""
        assert self._session is not None, "use Transport inside 'async with'"
        at = time.monotonic()
        refusal = self._precheck(url)
        if refusal is not None:
            return Outcome(started=at, error=refusal, sent=False)
        started = time.perf_counter()
        try:
            async with self._session.post(url, data=body, headers=headers, allow_redirects=False) as response:
                text = await _head_of(response)
                status = response.status
                retry_after = parse_retry_after(response.headers.get("Retry-After"), datetime.now(UTC))
                location = response.headers.get("Location")
        except TimeoutError:
            return Outcome(started=at, latency_ms=_ms(started), error=f"timed out after {self.timeout_s:g} s")
        except (aiohttp.ClientError, OSError) as exc:
            refused = _refused_by(exc)
            if refused is not None:
                return Outcome(started=at, error=f"not sent: {refused.message}", sent=False)
            return Outcome(started=at, latency_ms=_ms(started), error=_describe(exc))
        error = None
        if 300 <= status < 400:
            error = f"redirect{f' to {location}' if location else ''} not followed: a 3xx answer is a failure"
        return Outcome(started=at, status_code=status, latency_ms=_ms(started), response=text, error=error,
                       retry_after_s=retry_after)


def _trace_configs() -> list[aiohttp.TraceConfig] | None:
    if not tracing.active():
        return None
    from opentelemetry.instrumentation.aiohttp_client import create_trace_config

    return [create_trace_config()]


async def _head_of(response: aiohttp.ClientResponse) -> str:
    """The first KiB of the body (the connection is reused only when the body ends there)."""
    kept = bytearray()
    while len(kept) < RESPONSE_KEEP_BYTES:
        chunk = await response.content.read(RESPONSE_KEEP_BYTES - len(kept))
        if not chunk:
            break
        kept += chunk
    return kept.decode("utf-8", errors="replace")


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _describe(exc: BaseException) -> str:
    detail = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {detail}"[:1000]

