"""HTTP transports whose every TCP connection passes the SSRF guard, for httpx and for httpx2.

The guard runs where it cannot be raced: :class:`GuardedBackend` is the network backend of the
connection pool, so every TCP connection (the first request, each redirect hop, a reconnect)
resolves the host itself, refuses if any address is loopback, private, link-local or metadata
(unless the operator allow-listed it), and connects to the address it checked. A DNS answer that
changes between a check and a connect (rebinding) cannot slip through: there is no second lookup.

httpx's ``AsyncHTTPTransport`` takes no network backend, but httpcore's ``AsyncConnectionPool``
does (its public ``network_backend`` argument). So the transports here are httpx's own, reduced to
what toolrelay uses: a pool built with the guarded backend, requests and responses translated
between the two libraries, and httpcore's errors raised as httpx's (most specific first, as httpx
does). No proxy and no environment settings: a proxy would connect on the guard's behalf.

One implementation serves both libraries. httpx2 (the HTTP client of the ``mcp`` SDK) is httpx's
fork with the same public API, over httpcore2; :class:`GuardedTransport` is for httpx (api_call
tools, integrations), :class:`GuardedTransport2` for httpx2 (MCP servers).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, ClassVar

import anyio
import httpcore
import httpcore2
import httpx
import httpx2

from receipts.outbound.guard import OutboundGuard
from workers.errors import Forbidden, ToolTimeout, UpstreamError

Resolver = Callable[[str, int], Awaitable[list[str]]]

# httpcore's errors that httpx re-raises under the same name (httpx's own table, by name).
MAPPED_ERRORS = frozenset({
    "TimeoutException", "ConnectTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout", "NetworkError",
    "ConnectError", "ReadError", "WriteError", "ProxyError", "UnsupportedProtocol", "ProtocolError",
    "LocalProtocolError", "RemoteProtocolError",
})


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system's resolver gives for ``host`` (TCP), in its order."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class GuardedBackend:
    """An httpcore network backend (httpcore and httpcore2 alike) that connects only to allowed addresses.

    Args:
        inner: the backend that opens the sockets (httpcore's ``AnyIOBackend``).
        guard: decides which addresses may be reached.
        resolve: host name to addresses; the system's resolver unless a test stands in for DNS.
    """

    def __init__(self, inner: Any, guard: OutboundGuard, *, resolve: Resolver = system_resolver) -> None:
        self.inner = inner
        self.guard = guard
        self.resolve = resolve

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None, socket_options: Iterable[Any] | None = None) -> Any:
        try:
            with anyio.fail_after(timeout):
                answers = await self.resolve(host, port)
        except TimeoutError:
            raise ToolTimeout(f"resolving {host} took longer than {timeout:g} s") from None
        except OSError as exc:
            raise UpstreamError(f"cannot resolve host {host!r}: {exc}") from None
        addresses = list(dict.fromkeys(ipaddress.ip_address(answer.split("%", 1)[0]) for answer in answers))
        refused = sorted(str(a) for a in addresses if not self.guard.address_allowed(a))
        if refused:
            raise Forbidden(
                f"{host} resolves to a non-public address ({', '.join(refused)}): loopback, private, link-local and "
                f"metadata addresses are refused unless allow-listed in TOOLRELAY_OUTBOUND_ALLOW_CIDRS",
                details={"host": host, "addresses": refused},
            )
        if not addresses:
            raise UpstreamError(f"cannot resolve host {host!r}: no address")
        last: BaseException | None = None
        for address in addresses:  # connect to the very address that was checked: no second lookup
            try:
                return await self.inner.connect_tcp(str(address), port, timeout=timeout, local_address=local_address,
                                                    socket_options=socket_options)
            except Exception as exc:  # noqa: BLE001 - try the next address, raise the last failure
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Any:
        raise Forbidden("unix sockets are never reached from tools")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class _ResponseBody:
    """A response body read from httpcore, its errors raised as the client library's."""

    def __init__(self, stream: Any, errors: Callable[[], Any]) -> None:
        self._stream = stream
        self._errors = errors

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with self._errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        if hasattr(self._stream, "aclose"):
            await self._stream.aclose()


class _ResponseBody1(_ResponseBody, httpx.AsyncByteStream):
    """For httpx, whose responses read only its own stream type."""


class _ResponseBody2(_ResponseBody, httpx2.AsyncByteStream):
    """For httpx2, likewise."""


class _Guarded:
    """The body of both transports: ``lib`` is the client library, ``core`` its httpcore."""

    lib: ClassVar[ModuleType]
    core: ClassVar[ModuleType]
    body: ClassVar[type[_ResponseBody]]

    def __init__(self, guard: OutboundGuard, *, verify: bool = True, max_connections: int = 100,
                 max_keepalive_connections: int = 20, keepalive_expiry: float = 5.0,
                 resolve: Resolver = system_resolver) -> None:
        self.pool = self.core.AsyncConnectionPool(
            ssl_context=self.lib.create_ssl_context(verify=verify, trust_env=False),
            max_connections=max_connections, max_keepalive_connections=max_keepalive_connections,
            keepalive_expiry=keepalive_expiry, retries=0,
            network_backend=GuardedBackend(self.core.AnyIOBackend(), guard, resolve=resolve))

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Raise httpcore's errors as the client library's error of the same name (the most specific one)."""
        try:
            yield
        except Exception as exc:
            for cls in type(exc).__mro__:
                if cls.__name__ in MAPPED_ERRORS and getattr(self.core, cls.__name__, None) is cls:
                    raise getattr(self.lib, cls.__name__)(str(exc)) from exc
            raise

    async def handle_async_request(self, request: Any) -> Any:
        url = request.url
        sent = self.core.Request(
            method=request.method,
            url=self.core.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw, content=request.stream, extensions=request.extensions)
        with self._errors():
            answer = await self.pool.handle_async_request(sent)
        return self.lib.Response(status_code=answer.status, headers=answer.headers,
                                 stream=self.body(answer.stream, self._errors), extensions=answer.extensions)

    async def aclose(self) -> None:
        await self.pool.aclose()


class GuardedTransport(_Guarded, httpx.AsyncBaseTransport):
    """An httpx transport whose every connection passes the SSRF guard."""

    lib: ClassVar[ModuleType] = httpx
    core: ClassVar[ModuleType] = httpcore
    body: ClassVar[type[_ResponseBody]] = _ResponseBody1


class GuardedTransport2(_Guarded, httpx2.AsyncBaseTransport):
    """An httpx2 transport (the ``mcp`` SDK's client) whose every connection passes the SSRF guard."""

    lib: ClassVar[ModuleType] = httpx2
    core: ClassVar[ModuleType] = httpcore2
    body: ClassVar[type[_ResponseBody]] = _ResponseBody2
