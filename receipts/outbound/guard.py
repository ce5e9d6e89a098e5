"""The SSRF guard for every request toolrelay sends on a user's behalf (api_call tools, webhooks).

A URL may be reached only over http(s), and only when every address its host resolves to is
public: loopback, private, link-local (which includes cloud metadata at 169.254.169.254), multicast,
reserved and unspecified addresses are refused, unless the operator allow-lists their CIDR in
``TOOLRELAY_OUTBOUND_ALLOW_CIDRS``. Check at registration for a clear early error, and again right
before each request (and each redirect hop), because DNS answers change.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from receipts.errors import InvalidInput

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class OutboundRefused(InvalidInput):
    """This URL may not be reached from toolrelay."""


def _is_public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    )


class OutboundGuard:
    """Decides whether a URL may be requested. ``allow_cidrs`` re-opens chosen private ranges."""

    def __init__(self, allow_cidrs: Iterable[str] = ()) -> None:
        try:
            self.allowed: list[IPNetwork] = [ipaddress.ip_network(c.strip(), strict=False) for c in allow_cidrs]
        except ValueError as exc:
            raise ValueError(f"TOOLRELAY_OUTBOUND_ALLOW_CIDRS: {exc}") from exc

    def address_allowed(self, address: IPAddress) -> bool:
        return _is_public(address) or any(address in network for network in self.allowed)

    def check(self, url: str, *, field: str = "url") -> list[IPAddress]:
        """Resolve ``url``'s host and return its addresses, or raise :class:`OutboundRefused`."""
        try:  # urlsplit and hostname raise ValueError for a URL they cannot take apart (``http://[x/``)
            parts = urlsplit(url)
            host = parts.hostname
        except ValueError as exc:
            raise OutboundRefused(f"not a URL: {exc}",
                                  errors=[{"field": field, "message": f"not a URL: {exc}"}]) from None
        if parts.scheme not in ("http", "https"):
            raise OutboundRefused("only http and https URLs are allowed",
                                  errors=[{"field": field, "message": "scheme must be http or https"}])
        if not host:
            raise OutboundRefused("the URL has no host", errors=[{"field": field, "message": "missing host"}])
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise OutboundRefused("invalid port", errors=[{"field": field, "message": "invalid port"}]) from None
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise OutboundRefused(f"cannot resolve host {host!r}",
                                  errors=[{"field": field, "message": f"host does not resolve: {exc}"}]) from None
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
        refused = sorted({str(a) for a in addresses if not self.address_allowed(a)})
        if refused:
            raise OutboundRefused(
                f"{host} resolves to a non-public address ({', '.join(refused)})",
                errors=[{"field": field, "message": "loopback, private, link-local and metadata addresses are refused "
                                                    "unless allow-listed in TOOLRELAY_OUTBOUND_ALLOW_CIDRS"}],
            )
        return addresses
