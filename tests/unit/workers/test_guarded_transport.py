"""The guarded transports (httpx and httpx2) against a real local server: what the guard checks is what is reached.

DNS is the one thing stood in for: :class:`Dns` answers names under ``.invalid`` (which no real
resolver resolves) with loopback addresses, in turn, as a rebinding attacker's server would. A
request that arrives at the local server therefore went to the address the guard checked: the
system could not have looked the name up a second time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest

from receipts.outbound.guard import OutboundGuard
from tests.support.stack import free_port
from tests.support.upstreams import Hang, Reply, Upstream, serving
from workers import egress
from workers.errors import Forbidden
from workers.guarded_transport import GuardedTransport, GuardedTransport2

FLAVOURS = [pytest.param((GuardedTransport, httpx), id="httpx"),
            pytest.param((GuardedTransport2, httpx2), id="httpx2")]


class Dns:
    """Answers each name with its lists of addresses in turn (the last repeating), and counts the lookups."""

    def __init__(self, **answers: list[list[str]]) -> None:
        self.answers = {name.replace("_", "-") + ".invalid": list(lists) for name, lists in answers.items()}
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        lists = self.answers[host]
        return lists.pop(0) if len(lists) > 1 else lists[0]


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with serving() as running:
        yield running


def get(flavour: tuple[type, Any], guard: OutboundGuard, dns: Dns, *urls: str, timeout: float = 10) -> list[Any]:
    """GET each of ``urls`` in turn on one client (one pool) over the guarded transport of ``flavour``."""
    transport_type, lib = flavour

    async def run() -> list[Any]:
        async with lib.AsyncClient(transport=transport_type(guard, resolve=dns), timeout=timeout) as client:
            return [await client.get(url) for url in urls]

    return asyncio.run(run())


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_request_goes_to_the_address_the_guard_checked(flavour: tuple[type, Any], upstream: Upstream) -> None:
    upstream.route("/ok", Reply(json={"ok": True}))
    dns = Dns(api=[["127.0.0.1"]])
    [answer] = get(flavour, OutboundGuard(["127.0.0.0/8"]), dns, f"http://api.invalid:{upstream.port}/ok")
    assert answer.status_code == 200 and answer.json() == {"ok": True}
    assert upstream.seen[0].headers["host"] == f"api.invalid:{upstream.port}"  # the name, sent to the checked address
    assert dns.lookups == ["api.invalid"]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_each_new_connection_is_checked_again_so_a_rebound_name_is_refused(flavour: tuple[type, Any],
                                                                         upstream: Upstream) -> None:
    # The server closes each connection, so the second request needs a new one: the name now answers
    # 127.0.0.2, which the operator did not allow (only 127.0.0.1 is).
    upstream.route("/ok", Reply(json={"ok": True}, headers={"Connection": "close"}))
    dns = Dns(rebind=[["127.0.0.1"], ["127.0.0.2"]])
    url = f"http://rebind.invalid:{upstream.port}/ok"
    with pytest.raises(Forbidden) as refused:
        get(flavour, OutboundGuard(["127.0.0.1/32"]), dns, url, url)
    assert refused.value.details == {"host": "rebind.invalid", "addresses": ["127.0.0.2"]}
    assert len(upstream.seen) == 1  # the first request went through; the second never left
    assert dns.lookups == ["rebind.invalid", "rebind.invalid"]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_name_with_any_refused_address_is_refused_whole(flavour: tuple[type, Any], upstream: Upstream) -> None:
    dns = Dns(mixed=[["127.0.0.1", "10.1.2.3", "169.254.169.254"]])
    with pytest.raises(Forbidden) as refused:
        get(flavour, OutboundGuard(["127.0.0.1/32"]), dns, f"http://mixed.invalid:{upstream.port}/ok")
    assert refused.value.details["addresses"] == ["10.1.2.3", "169.254.169.254"]
    assert upstream.seen == []


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_without_an_allow_list_loopback_is_refused(flavour: tuple[type, Any], upstream: Upstream) -> None:
    with pytest.raises(Forbidden):
        get(flavour, OutboundGuard([]), Dns(local=[["127.0.0.1"]]), f"http://local.invalid:{upstream.port}/")
    assert upstream.seen == []


def test_a_redirect_to_a_name_that_resolves_to_metadata_is_refused_at_the_hop(upstream: Upstream) -> None:
    upstream.route("/start", Reply(302, headers={"Location": "http://metadata.invalid/latest/meta-data/"}))
    dns = Dns(api=[["127.0.0.1"]], metadata=[["169.254.169.254"]])

    async def run() -> None:
        async with httpx.AsyncClient(transport=GuardedTransport(OutboundGuard(["127.0.0.0/8"]), resolve=dns)) as client:
            await egress.fetch(client, "GET", f"http://api.invalid:{upstream.port}/start", timeout_s=10,
                               max_bytes=1024, follow_redirects=True)

    with pytest.raises(Forbidden) as refused:
        asyncio.run(run())
    assert refused.value.details == {"host": "metadata.invalid", "addresses": ["169.254.169.254"]}
    assert [seen.path for seen in upstream.seen] == ["/start"]
    assert dns.lookups == ["api.invalid", "metadata.invalid"]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_connection_errors_are_the_client_librarys_own(flavour: tuple[type, Any]) -> None:
    _, lib = flavour
    with pytest.raises(lib.ConnectError):
        get(flavour, OutboundGuard(["127.0.0.0/8"]), Dns(closed=[["127.0.0.1"]]),
            f"http://closed.invalid:{free_port()}/")


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_timeouts_are_the_client_librarys_own(flavour: tuple[type, Any], upstream: Upstream) -> None:
    _, lib = flavour
    upstream.route("/hang", Hang())
    with pytest.raises(lib.ReadTimeout):
        get(flavour, OutboundGuard(["127.0.0.0/8"]), Dns(slow=[["127.0.0.1"]]),
            f"http://slow.invalid:{upstream.port}/hang", timeout=0.5)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_body_is_streamed_through(flavour: tuple[type, Any], upstream: Upstream) -> None:
    upstream.route("/big", Reply(body=b"x" * 300_000))
    [answer] = get(flavour, OutboundGuard(["127.0.0.0/8"]), Dns(big=[["127.0.0.1"]]),
                   f"http://big.invalid:{upstream.port}/big")
    assert answer.content == b"x" * 300_000
