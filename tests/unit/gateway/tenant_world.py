"""A world for tenant isolation tests: two fresh tenants on the real app, and one of everything built by
the first, through the API (with its own names, traces and keys, drawn by the test).

Tenant ``a`` owns: its tools (a function tool, an api_call tool that needs approval, an integration
tool), receipts in each state the API can reach without a worker (pending, waiting for a client,
waiting for approval), a batch, a model, a run, a webhook endpoint with the deliveries its receipts
queued, the default webhook secret, an integration setup and an MCP session. Tenant ``b`` has a key
and nothing else. :meth:`World.snapshot` is everything ``a`` sees of what it owns, to compare after
``b`` has done its worst.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import routing
from fastapi.testclient import TestClient

from receipts import tenants
from receipts.catalogue import providers
from receipts.catalogue.providers import ProviderMethod
from receipts.db import Database

PROVIDER = ProviderMethod(
    provider="crm", method="lookup", description="Look a customer up in the CRM.",
    arguments={"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
    setup={"type": "object", "properties": {"api_key": {"type": "string", "writeOnly": True},
                                            "region": {"type": "string"}}},
    output={"type": "object"}, provider_description="A CRM for tests.")
HOOK_URL = "http://127.0.0.1:9/hooks/"
MARK = "tenant-a's"  # begins every description a gives its things
MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}
MCP_VERSION = "2025-11-25"


def publish_provider(db: Database) -> None:
    """What a worker publishes for the integration provider the world's setup and tool use."""
    db.run(providers.publish([PROVIDER]))


def app_routes(app: Any) -> set[tuple[str, str]]:
    """Every (method, path) the app serves, from the app itself (``*`` for a mounted app, any method).

    FastAPI from 0.150 keeps an included router's routes behind it (``iter_route_contexts`` walks
    them); before that, ``app.routes`` lists them all.
    """
    walk = getattr(routing, "iter_route_contexts", None)
    found = walk(app.routes) if walk is not None else app.routes
    return {(method, route.path) for route in found for method in (route.methods or {"*"}) if method != "HEAD"}


@dataclass(frozen=True)
class Names:
    """What tenant ``a`` calls its things (drawn by the test; ``b`` may pick the same)."""

    tool: str
    model: str
    trace_id: str
    idempotency_key: str
    arguments: dict[str, Any]
    metadata: dict[str, Any]

    @property
    def approval_tool(self) -> str:
        return f"{self.tool}_ok"[:64]

    @property
    def integration_tool(self) -> str:
        return f"{self.tool}_crm"[:64]


@dataclass
class Tenant:
    key: str
    id: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@dataclass
class World:
    client: TestClient
    names: Names
    a: Tenant
    b: Tenant
    receipts: dict[str, str] = field(default_factory=dict)  # pending, function, approval, batch
    batch: str = ""
    batch_call_ids: list[str] = field(default_factory=list)
    run: str = ""
    endpoint: str = ""
    deliveries: list[str] = field(default_factory=list)
    mcp_session: dict[str, str] = field(default_factory=dict)

    def call(self, tenant: Tenant, method: str, path: str, *, body: Any = None, params: dict[str, Any] | None = None,
             headers: dict[str, str] | None = None) -> Any:
        headers = {**tenant.headers, **(headers or {})}
        return self.client.request(method, path, json=body, params=params, headers=headers)

    def ok(self, tenant: Tenant, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON of a request that must succeed."""
        response = self.call(tenant, method, path, **kwargs)
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response.json() if response.content else None

    @property
    def objects(self) -> dict[str, str]:
        """Every path of a thing of ``a``'s that has an id (unique: ``b`` can never own the same one)."""
        paths = {f"receipt {kind}": f"/v1/receipts/{rid}" for kind, rid in self.receipts.items()}
        paths.update({"batch": f"/v1/batches/{self.batch}", "run": f"/v1/runs/{self.run}",
                      "endpoint": f"/v1/webhook-endpoints/{self.endpoint}"})
        paths.update({f"delivery {i}": f"/v1/deliveries/{mid}" for i, mid in enumerate(self.deliveries)})
        return paths

    def ids(self) -> set[str]:
        return {*self.receipts.values(), self.batch, self.run, self.endpoint, *self.deliveries}

    def snapshot(self) -> dict[str, Any]:
        """Everything ``a`` sees of what it owns."""
        a, names = self.a, self.names
        seen: dict[str, Any] = {label: self.ok(a, "GET", path) for label, path in self.objects.items()}
        for rid in self.receipts.values():
            seen[f"events {rid}"] = self.ok(a, "GET", f"/v1/receipts/{rid}/events")
        seen["receipts"] = self.ok(a, "GET", "/v1/receipts", params={"limit": 200})
        seen["runs"] = self.ok(a, "GET", "/v1/runs")
        seen["tools"] = self.ok(a, "GET", "/v1/tools")
        for name in (names.tool, names.approval_tool, names.integration_tool):
            seen[f"tool {name}"] = self.ok(a, "GET", f"/v1/tools/{name}")
        seen["model"] = self.ok(a, "GET", f"/v1/models/{names.model}")
        seen["models"] = self.ok(a, "GET", "/v1/models")
        seen["endpoints"] = self.ok(a, "GET", "/v1/webhook-endpoints")
        seen["deliveries"] = self.ok(a, "GET", "/v1/deliveries", params={"limit": 200})
        seen["endpoint deliveries"] = self.ok(a, "GET", f"/v1/webhook-endpoints/{self.endpoint}/deliveries")
        seen["secret"] = self.ok(a, "GET", "/v1/webhook-secret")
        seen["integrations"] = self.ok(a, "GET", "/v1/integrations")
        seen["setup"] = self.ok(a, "GET", f"/v1/integrations/{PROVIDER.provider}/setup")
        seen["mcp tools"] = sorted(tool["name"] for tool in self.mcp(a, "tools/list", session=self.mcp_session)
                                   ["result"]["tools"])
        return seen

    # -- MCP, as its raw protocol over the app ---------------------------------------------------

    def mcp_post(self, tenant: Tenant, message: dict[str, Any], session: dict[str, str] | None = None) -> Any:
        return self.client.post("/mcp", json=message, headers={**tenant.headers, **MCP_ACCEPT, **(session or {})})

    def mcp_open(self, tenant: Tenant) -> dict[str, str]:
        """A new MCP session of ``tenant``: the headers that name it."""
        opened = self.mcp_post(tenant, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                        "params": {"protocolVersion": MCP_VERSION, "capabilities": {},
                                                   "clientInfo": {"name": "isolation", "version": "1"}}})
        assert opened.status_code == 200, opened.text
        return {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": MCP_VERSION}

    def mcp(self, tenant: Tenant, method: str, params: dict[str, Any] | None = None, *,
            session: dict[str, str]) -> dict[str, Any]:
        """The JSON-RPC answer to one request on ``session`` (sent as JSON or as one server-sent event)."""
        message = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, **({"params": params} if params else {})}
        response = self.mcp_post(tenant, message, session)
        assert response.status_code == 200, response.text
        if response.headers["content-type"].startswith("text/event-stream"):
            data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
            return json.loads(data[-1])  # type: ignore[no-any-return]
        return response.json()  # type: ignore[no-any-return]


def new_tenant(db: Database, label: str) -> Tenant:
    key = db.run(tenants.create_key(f"{label}-{uuid.uuid4().hex[:10]}"))
    tenant = db.run(tenants.for_key(key))
    assert tenant is not None
    return Tenant(key, tenant.id)


def build_world(client: TestClient, db: Database, names: Names) -> World:
    """Two new tenants; ``a`` makes one of everything, through the API."""
    world = World(client, names, new_tenant(db, "a"), new_tenant(db, "b"))
    a, ok = world.a, world.ok
    ok(a, "POST", "/v1/webhook-secret")
    world.endpoint = ok(a, "POST", "/v1/webhook-endpoints", body={"url": f"{HOOK_URL}a", "description": MARK})["id"]
    ok(a, "POST", "/v1/tools", body={"kind": "function", "name": names.tool, "description": f"{MARK} client-run tool",
                                     "parameters": {"type": "object"}})
    ok(a, "POST", "/v1/tools", body={"kind": "api_call", "name": names.approval_tool, "description": f"{MARK} refund",
                                     "parameters": {"type": "object"}, "requires_approval": True,
                                     "request": {"method": "POST", "url": "http://127.0.0.1:9/refunds"}})
    ok(a, "PUT", f"/v1/integrations/{PROVIDER.provider}/setup", body={"api_key": "a-secret", "region": "eu"})
    ok(a, "POST", "/v1/tools", body={"kind": "integration", "name": names.integration_tool, "description": MARK,
                                     "provider": PROVIDER.provider, "method": PROVIDER.method})
    common = {"trace_id": names.trace_id, "metadata": names.metadata}
    world.receipts["pending"] = ok(a, "POST", "/v1/tool-calls", headers={"Idempotency-Key": names.idempotency_key},
                                   body={"tool": "echo", "arguments": names.arguments, **common})["id"]
    world.receipts["function"] = ok(a, "POST", "/v1/tool-calls",
                                    body={"tool": names.tool, "arguments": names.arguments, **common})["id"]
    world.receipts["approval"] = ok(a, "POST", "/v1/tool-calls",
                                    body={"tool": names.approval_tool, "arguments": names.arguments, **common})["id"]
    world.batch_call_ids = ["call_1", "call_2"]
    batch = ok(a, "POST", "/v1/batches", headers={"Idempotency-Key": f"batch-{names.idempotency_key}"[:255]},
               body=batch_body(names, world.batch_call_ids))
    world.batch, world.receipts["batch"] = batch["id"], batch["receipts"][0]
    ok(a, "PUT", f"/v1/models/{names.model}", body={"base_url": "http://127.0.0.1:9/a/v1", "model": "a-model"})
    world.run = ok(a, "POST", "/v1/runs", headers={"Idempotency-Key": f"run-{names.idempotency_key}"[:255]},
                   body={"model": names.model, "input": "hello", "tools": ["echo"], **common})["id"]
    world.deliveries = [item["id"] for item in ok(a, "GET", "/v1/deliveries", params={"limit": 200})["data"]]
    assert world.deliveries, "a's receipts queued no webhook message"
    world.mcp_session = world.mcp_open(a)
    return world


def batch_body(names: Names, call_ids: list[str]) -> dict[str, Any]:
    """A model's two calls (echo, and ``a``'s client-run tool) under ``a``'s trace."""
    calls = [{"id": call_ids[0], "type": "function",
              "function": {"name": "echo", "arguments": json.dumps(names.arguments)}},
             {"id": call_ids[1], "type": "function", "function": {"name": names.tool, "arguments": "{}"}}]
    return {"format": "openai_chat", "trace_id": names.trace_id, "wait_s": 0,
            "message": {"role": "assistant", "tool_calls": calls}}


def walk(value: Any) -> Iterator[Any]:
    """Every value inside a JSON document (to look for an id anywhere in an answer)."""
    stack = [value]
    while stack:
        item = stack.pop()
        yield item
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
