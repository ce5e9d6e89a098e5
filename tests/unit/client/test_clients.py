"""Client and AsyncClient as thin transports: the same requests for the same calls, errors mapped on entry.

httpx.MockTransport stands in for the gateway here; what these tests check is what the clients send
and how they read the answers, not the gateway (tests/acceptance/test_sdk.py runs against a real one).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from tests.unit.client import payloads
from toolrelay.client import AsyncClient, Client, ConnectionFailed, NotFound, Receipt, Unauthorized

BASE = "http://toolrelay.test"
KEY = "trk_unit"
TOOL = {"name": "echo", "kind": "python", "description": "Return the arguments.", "parameters": {"type": "object"},
        "effect": "read", "idempotent": True, "timeout_s": 30.0, "max_attempts": 3}


class FakeApi:
    """Canned answers by route; records every request as (method, path, query, body, idempotency key)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str], Any, str | None]] = []
        self.timeouts: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == f"Bearer {KEY}"
        assert request.headers["user-agent"].startswith("toolrelay-client/")
        body = json.loads(request.content) if request.content else None
        query = dict(request.url.params)
        self.seen.append((request.method, request.url.path, query, body, request.headers.get("idempotency-key")))
        timeouts = request.extensions["timeout"]
        assert timeouts["connect"] == timeouts["write"] == timeouts["pool"]  # the client's own, never held
        self.timeouts.append(timeouts["read"])
        return httpx.Response(200, json=self.answer(request.method, request.url.path, query))

    def answer(self, method: str, path: str, query: dict[str, str]) -> Any:
        if path == "/v1/receipts" and method == "GET":  # two pages
            if "cursor" not in query:
                return {"data": [payloads.receipt(id="rcpt_3"), payloads.receipt(id="rcpt_2")], "next_cursor": "p2"}
            return {"data": [payloads.receipt(id="rcpt_1")], "next_cursor": None}
        if path.endswith("/events"):
            return {"data": [{"id": 1, "at": "2026-11-29T19:30:05Z", "from_status": None, "to_status": "pending",
                              "attempt": 0, "actor": "api", "detail": {}}], "next_cursor": None}
        if path.startswith("/v1/batches"):
            return payloads.batch()
        if path == "/v1/runs" and method == "GET":
            return {"data": [payloads.run()], "next_cursor": None}
        if path == "/v1/runs/run_w":
            return payloads.run(id="run_w", status="waiting")
        if path.startswith("/v1/runs"):
            return payloads.run()
        if path == "/v1/tools":
            if method == "POST":
                return TOOL
            if query.get("format"):
                return [{"type": "function", "function": {"name": "echo"}}]
            return {"data": [TOOL], "next_cursor": None}
        if path.startswith("/v1/models/"):
            return {"name": "local", "base_url": "https://llm.example.com/v1", "model": "m", "params": {}}
        return payloads.receipt(id="rcpt_1", status="success")


def sync_script(client: Client) -> list[Any]:
    """Every method once, blocking; what each returned, in a comparable form."""
    return [
        client.submit("echo", {"n": 1}, trace_id="trace_x", idempotency_key="k1", wait_s=5).id,
        client.get("rcpt_1").status,
        client.get("rcpt_1", wait_s=20).status,
        client.wait("rcpt_1", timeout=90).status,
        [r.id for r in client.list(trace_id="trace_x", limit=2)],
        [e.to_status for e in client.events("rcpt_1")],
        client.cancel("rcpt_1").status,
        client.submit_result("rcpt_1", output={"ok": True}).status,
        client.submit_result("rcpt_1", error="declined").status,
        client.approve("rcpt_1", "ana", comment="fine").status,
        client.reject("rcpt_1", "bo", reason="no").status,
        client.batch("openai_chat", {"role": "assistant", "tool_calls": []}, wait_s=10, idempotency_key="b1").id,
        client.get_batch("batch_1", wait_s=30).receipts,
        client.run("local", "hi", ["echo"], max_iterations=3).id,
        client.get_run("run_1", wait_s=15).status,
        [r.id for r in client.list_runs(status="pending")],
        client.cancel_run("run_1").id,
        [t.name for t in client.tools()],
        client.tools("openai"),
        client.define_tool({"kind": "function", "name": "echo", "parameters": {"type": "object"}}).name,
        client.define_model("local", base_url="https://llm.example.com/v1", model="m", api_key="sk").model,
        client.wait_run("run_w", timeout=90).status,
    ]


async def async_script(client: AsyncClient) -> list[Any]:
    """The same calls as :func:`sync_script`, awaited."""
    return [
        (await client.submit("echo", {"n": 1}, trace_id="trace_x", idempotency_key="k1", wait_s=5)).id,
        (await client.get("rcpt_1")).status,
        (await client.get("rcpt_1", wait_s=20)).status,
        (await client.wait("rcpt_1", timeout=90)).status,
        [r.id async for r in client.list(trace_id="trace_x", limit=2)],
        [e.to_status for e in await client.events("rcpt_1")],
        (await client.cancel("rcpt_1")).status,
        (await client.submit_result("rcpt_1", output={"ok": True})).status,
        (await client.submit_result("rcpt_1", error="declined")).status,
        (await client.approve("rcpt_1", "ana", comment="fine")).status,
        (await client.reject("rcpt_1", "bo", reason="no")).status,
        (await client.batch("openai_chat", {"role": "assistant", "tool_calls": []}, wait_s=10,
                            idempotency_key="b1")).id,
        (await client.get_batch("batch_1", wait_s=30)).receipts,
        (await client.run("local", "hi", ["echo"], max_iterations=3)).id,
        (await client.get_run("run_1", wait_s=15)).status,
        [r.id async for r in client.list_runs(status="pending")],
        (await client.cancel_run("run_1")).id,
        [t.name for t in await client.tools()],
        await client.tools("openai"),
        (await client.define_tool({"kind": "function", "name": "echo", "parameters": {"type": "object"}})).name,
        (await client.define_model("local", base_url="https://llm.example.com/v1", model="m", api_key="sk")).model,
        (await client.wait_run("run_w", timeout=90)).status,
    ]


def run_sync(api: FakeApi) -> list[Any]:
    with Client(BASE, api_key=KEY, transport=httpx.MockTransport(api)) as client:
        return sync_script(client)


def run_async(api: FakeApi) -> list[Any]:
    async def main() -> list[Any]:
        async with AsyncClient(BASE, api_key=KEY, transport=httpx.MockTransport(api)) as client:
            return await async_script(client)

    return asyncio.run(main())


def public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars(cls).items()
            if callable(member) and not name.startswith("_")}


def test_both_clients_offer_the_same_methods_with_the_same_parameters() -> None:
    sync, asynchronous = public_methods(Client), public_methods(AsyncClient)
    assert set(sync) - {"close"} == set(asynchronous) - {"aclose"}
    for name in set(sync) - {"close"}:
        assert list(sync[name].parameters.values()) == list(asynchronous[name].parameters.values()), name


def test_both_clients_send_the_same_requests_and_read_the_same_answers() -> None:
    sync_api, async_api = FakeApi(), FakeApi()
    assert run_sync(sync_api) == run_async(async_api)
    assert sync_api.seen == async_api.seen
    assert sync_api.timeouts == async_api.timeouts


def test_what_the_script_sends() -> None:
    api = FakeApi()
    results = run_sync(api)
    assert results[4] == ["rcpt_3", "rcpt_2", "rcpt_1"]  # both pages of the listing
    assert results[12] == ("rcpt_a", "rcpt_b")
    assert api.seen[0] == ("POST", "/v1/tool-calls", {},
                           {"tool": "echo", "arguments": {"n": 1}, "trace_id": "trace_x", "wait_s": 5}, "k1")
    assert api.seen[3] == ("GET", "/v1/receipts/rcpt_1", {"wait_s": "60"}, None, None)  # wait's first slice
    assert [entry[2] for entry in api.seen[4:6]] == [{"trace_id": "trace_x", "limit": "2"},
                                                     {"trace_id": "trace_x", "limit": "2", "cursor": "p2"}]
    assert api.seen[9][3] == {"error": {"message": "declined"}}
    assert api.seen[12][1:] == ("/v1/batches", {}, {"format": "openai_chat", "message":
                                                    {"role": "assistant", "tool_calls": []}, "wait_s": 10}, "b1")
    assert api.seen[-1] == ("GET", "/v1/runs/run_w", {"wait_s": "60"}, None, None)  # wait_run's first slice
    assert results[-1] == "waiting"  # returned, not waited on: it waits for a person


def test_a_long_poll_gets_its_wait_on_top_of_the_timeout() -> None:
    api = FakeApi()
    with Client(BASE, api_key=KEY, timeout=7, transport=httpx.MockTransport(api)) as client:
        client.get("rcpt_1")
        client.get("rcpt_1", wait_s=20)
        client.submit("echo", wait_s=5)
    assert api.timeouts == [7, 27, 12]


def refusing(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


def test_a_transport_error_becomes_connection_failed_raised_from_it() -> None:
    with Client(BASE, api_key=KEY, transport=httpx.MockTransport(refusing)) as client, \
            pytest.raises(ConnectionFailed) as caught:
        client.submit("echo")
    assert str(caught.value) == "POST http://toolrelay.test/v1/tool-calls: [Errno 111] Connection refused"
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert caught.value.status is None and caught.value.retry_after is None


def test_the_async_client_maps_transport_errors_too() -> None:
    async def main() -> None:
        async with AsyncClient(BASE, api_key=KEY, transport=httpx.MockTransport(refusing)) as client:
            await client.get("rcpt_1")

    with pytest.raises(ConnectionFailed) as caught:
        asyncio.run(main())
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


def answering(status: int, body: dict[str, Any]) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(status, json=body, headers={"content-type": "application/problem+json"})


def test_an_error_answer_raises_on_the_method_and_on_the_first_step_of_a_listing() -> None:
    missing = httpx.MockTransport(answering(404, payloads.problem(404, "Not Found", "no receipt rcpt_x")))
    with Client(BASE, api_key=KEY, transport=missing) as client:
        with pytest.raises(NotFound, match="no receipt rcpt_x"):
            client.wait("rcpt_x", timeout=5)
        listing = client.list(trace_id="t")  # lazy: nothing sent yet
        with pytest.raises(NotFound):
            next(listing)


def test_the_async_listing_raises_as_it_is_iterated() -> None:
    denied = httpx.MockTransport(answering(401, payloads.problem(401, "Unauthorized", "unknown API key")))

    async def main(step: Callable[[AsyncClient], Awaitable[Any]]) -> Any:
        async with AsyncClient(BASE, api_key=KEY, transport=denied) as client:
            return await step(client)

    async def first(client: AsyncClient) -> Receipt:
        return await anext(client.list())

    with pytest.raises(Unauthorized, match="401 Unauthorized: unknown API key"):
        asyncio.run(main(first))
