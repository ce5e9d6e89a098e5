"""Tenant isolation as a property, over every route of the app: whatever tenant ``a`` makes, tenant ``b``
can never read, list, wait on, cancel, decide, update or delete it.

Each example builds a world (tests/unit/gateway/tenant_world.py): two new tenants, and one of
everything made by ``a`` with names, traces, keys and arguments drawn by hypothesis. Then ``b`` runs
every probe, in a drawn order: each route is tried on ``a``'s things (a thing with an id is a 404,
not a 403: nothing is told), lists are read with ``a``'s traces, tools and ids as filters (none of
``a``'s things in them), and ``b`` makes its own things under ``a``'s names and keys (its own, never
``a``'s). Finally ``a`` sees everything exactly as before.

The routes come from the app itself: a route that is neither probed here nor listed as holding no
tenant's data fails the first test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from receipts.db import Database
from tests.unit.gateway.conftest import Gateway, assert_problem, running_gateway
from tests.unit.gateway.tenant_world import (
    HOOK_URL,
    MARK,
    PROVIDER,
    Names,
    World,
    app_routes,
    batch_body,
    build_world,
    publish_provider,
    walk,
)

Route = tuple[str, str]

# Routes that hold no tenant's data, and why.
NOT_TENANT_SCOPED: dict[Route, str] = {
    ("GET", "/openapi.json"): "the API's description",
    ("GET", "/docs"): "the API's page",
    ("GET", "/docs/oauth2-redirect"): "the API page's OAuth helper",
    ("*", "/static-offline-docs"): "the API page's script and styles",
    ("GET", "/healthz"): "liveness",
    ("GET", "/readyz"): "readiness of the database and the broker",
    ("GET", "/metrics"): "the operator's figures (tools by name, no tenant), for a scraper inside the deployment",
    ("GET", "/console"): "a redirect to the console's page",
    ("GET", "/console/{relative:path}"): "the console's files; its data comes from /v1, with the user's key",
}


@dataclass
class Probe:
    """``b``'s side of one example: the world, hypothesis's draw, and what ``b`` made of its own so far."""

    world: World
    draw: Callable[[Any], Any]
    made: set[str] = field(default_factory=set)

    @property
    def names(self) -> Names:
        return self.world.names

    def b(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.world.call(self.world.b, method, path, **kwargs)

    def wait_s(self) -> float:
        return float(self.draw(st.sampled_from([0, 0.05, 0.2])))

    def not_found(self, response: Any) -> None:
        """A 404 problem that names nothing of ``a``'s but what ``b`` asked for."""
        assert_problem(response, 404)

    def hidden(self, response: Any) -> Any:
        """A 2xx answer in which none of ``a``'s ids, nor anything ``a`` described as its own, appears."""
        assert response.status_code < 300, response.text
        body = response.json()
        ids = self.world.ids()
        for value in walk(body):
            assert not (isinstance(value, str) and (value in ids or value.startswith(MARK))), (value, body)
        return body


PROBES: dict[Route, Callable[[Probe], None]] = {}


def probe(method: str, path: str) -> Callable[[Callable[[Probe], None]], Callable[[Probe], None]]:
    def register(function: Callable[[Probe], None]) -> Callable[[Probe], None]:
        PROBES[(method, path)] = function
        return function
    return register


# -- receipts and calls ----------------------------------------------------------------------------

@probe("POST", "/v1/tool-calls")
def submit_under_as_key_and_as_tools(p: Probe) -> None:
    names = p.names
    body = {"tool": "echo", "arguments": names.arguments, "trace_id": names.trace_id, "metadata": names.metadata}
    mine = p.hidden(p.b("POST", "/v1/tool-calls", body=body, headers={"Idempotency-Key": names.idempotency_key}))
    assert mine["id"] not in p.world.ids()
    for tool in (names.approval_tool, names.integration_tool):  # a's own tools are no tools of b's
        assert_problem(p.b("POST", "/v1/tool-calls", body={"tool": tool, "arguments": names.arguments}), 422)


@probe("GET", "/v1/receipts/{receipt_id}")
def read_and_wait_on_as_receipts(p: Probe) -> None:
    for receipt_id in p.world.receipts.values():
        p.not_found(p.b("GET", f"/v1/receipts/{receipt_id}", params={"wait_s": p.wait_s()}))


@probe("GET", "/v1/receipts")
def list_receipts_by_as_filters(p: Probe) -> None:
    names, receipts = p.names, p.world.receipts
    filters = p.draw(st.sampled_from([{}, {"trace_id": names.trace_id}, {"tool": names.tool}, {"tool": "echo"},
                                      {"tool": names.approval_tool}, {"status": "waiting"}, {"status": "pending"},
                                      {"parent_id": receipts["pending"]}, {"limit": 1}]))
    p.hidden(p.b("GET", "/v1/receipts", params=filters))
    p.hidden(p.b("GET", "/v1/receipts", params={"trace_id": names.trace_id}))


@probe("GET", "/v1/receipts/{receipt_id}/events")
def read_as_timelines(p: Probe) -> None:
    for receipt_id in p.world.receipts.values():
        p.not_found(p.b("GET", f"/v1/receipts/{receipt_id}/events"))


@probe("POST", "/v1/receipts/{receipt_id}/cancel")
def cancel_as_receipts(p: Probe) -> None:
    for receipt_id in p.world.receipts.values():
        p.not_found(p.b("POST", f"/v1/receipts/{receipt_id}/cancel"))


@probe("POST", "/v1/receipts/{receipt_id}/result")
def post_a_result_for_as_calls(p: Probe) -> None:
    for body in ({"output": {"forged": True}}, {"error": {"message": "forged"}}):
        for kind in ("function", "pending"):
            p.not_found(p.b("POST", f"/v1/receipts/{p.world.receipts[kind]}/result", body=body))


@probe("POST", "/v1/receipts/{receipt_id}/approve")
def approve_as_calls(p: Probe) -> None:
    for receipt_id in (p.world.receipts["approval"], p.world.receipts["function"]):
        p.not_found(p.b("POST", f"/v1/receipts/{receipt_id}/approve", body={"by": "b", "comment": "yes"}))


@probe("POST", "/v1/receipts/{receipt_id}/reject")
def reject_as_calls(p: Probe) -> None:
    for receipt_id in (p.world.receipts["approval"], p.world.receipts["pending"]):
        p.not_found(p.b("POST", f"/v1/receipts/{receipt_id}/reject", body={"by": "b", "reason": "no"}))


# -- batches ---------------------------------------------------------------------------------------

@probe("POST", "/v1/batches")
def replay_as_batch(p: Probe) -> None:
    names = p.names
    body = batch_body(names, p.world.batch_call_ids)  # a's trace and call ids: a's replay key
    for headers in ({}, {"Idempotency-Key": f"batch-{names.idempotency_key}"[:255]}):
        batch = p.hidden(p.b("POST", "/v1/batches", body=body, headers=headers))
        told = " ".join(message["content"] for message in batch["messages"] or [])
        for name in (names.approval_tool, names.integration_tool):  # the tools b may call: none of a's
            assert name not in told, told


@probe("GET", "/v1/batches/{batch_id}")
def read_and_wait_on_as_batch(p: Probe) -> None:
    p.not_found(p.b("GET", f"/v1/batches/{p.world.batch}", params={"wait_s": p.wait_s()}))


# -- models and runs -------------------------------------------------------------------------------

@probe("PUT", "/v1/models/{name}")
def define_a_model_under_as_name(p: Probe) -> None:
    model = p.hidden(p.b("PUT", f"/v1/models/{p.names.model}", body={"base_url": "http://127.0.0.1:9/b/v1",
                                                                       "model": "b-model"}))
    assert model["base_url"] == "http://127.0.0.1:9/b/v1"
    p.made.add("model")


@probe("GET", "/v1/models")
def list_models(p: Probe) -> None:
    models = p.hidden(p.b("GET", "/v1/models"))["data"]
    assert [model["base_url"] for model in models] == (["http://127.0.0.1:9/b/v1"] if "model" in p.made else [])


@probe("GET", "/v1/models/{name}")
def read_as_model(p: Probe) -> None:
    response = p.b("GET", f"/v1/models/{p.names.model}")
    if "model" in p.made:
        assert p.hidden(response)["base_url"] == "http://127.0.0.1:9/b/v1"
    else:
        p.not_found(response)


@probe("DELETE", "/v1/models/{name}")
def delete_as_model(p: Probe) -> None:
    response = p.b("DELETE", f"/v1/models/{p.names.model}")
    if "model" in p.made:  # b's own model of that name
        assert response.status_code == 204, response.text
        p.made.discard("model")
    else:
        p.not_found(response)


@probe("POST", "/v1/runs")
def start_a_run_on_as_model_under_as_key(p: Probe) -> None:
    names = p.names
    response = p.b("POST", "/v1/runs", headers={"Idempotency-Key": f"run-{names.idempotency_key}"[:255]},
                   body={"model": names.model, "input": "hello", "tools": ["echo"], "trace_id": names.trace_id})
    if "model" in p.made:
        assert p.hidden(response)["model"] == names.model
    else:
        assert_problem(response, 422)  # b has no model of that name: a's is not b's
    assert_problem(p.b("POST", "/v1/runs", body={"model": "m", "input": "x", "tools": [names.tool]}), 422)


@probe("GET", "/v1/runs/{run_id}")
def read_and_wait_on_as_run(p: Probe) -> None:
    p.not_found(p.b("GET", f"/v1/runs/{p.world.run}", params={"wait_s": p.wait_s()}))


@probe("GET", "/v1/runs")
def list_runs_by_as_trace(p: Probe) -> None:
    for params in ({}, {"trace_id": p.names.trace_id}, {"status": "pending"}):
        p.hidden(p.b("GET", "/v1/runs", params=params))


@probe("POST", "/v1/runs/{run_id}/cancel")
def cancel_as_run(p: Probe) -> None:
    p.not_found(p.b("POST", f"/v1/runs/{p.world.run}/cancel"))


# -- the catalogue ---------------------------------------------------------------------------------

def b_tool(name: str) -> dict[str, Any]:
    return {"kind": "function", "name": name, "description": "b's", "parameters": {"type": "object"}}


@probe("GET", "/v1/tools")
def list_tools_in_every_format(p: Probe) -> None:
    for tools_format in ("native", "openai", "anthropic"):
        listed = p.hidden(p.b("GET", "/v1/tools", params={"format": tools_format}))
        names = {value for value in walk(listed) if isinstance(value, str)}
        assert not names & {p.names.approval_tool, p.names.integration_tool}


@probe("GET", "/v1/tools/{name}")
def read_as_tools(p: Probe) -> None:
    names = p.names
    for name in (names.approval_tool, names.integration_tool):
        p.not_found(p.b("GET", f"/v1/tools/{name}"))
    response = p.b("GET", f"/v1/tools/{names.tool}")
    if "tool" in p.made:
        assert p.hidden(response)["description"] == "b's"
    else:
        p.not_found(response)


@probe("POST", "/v1/tools")
def define_a_tool_under_as_name(p: Probe) -> None:
    response = p.b("POST", "/v1/tools", body=b_tool(p.names.tool))
    if "tool" in p.made:
        assert_problem(response, 409)  # b's own, defined before
    else:
        assert p.hidden(response)["description"] == "b's"
    p.made.add("tool")


@probe("PUT", "/v1/tools/{name}")
def replace_as_tool(p: Probe) -> None:
    assert p.hidden(p.b("PUT", f"/v1/tools/{p.names.tool}", body=b_tool(p.names.tool)))["description"] == "b's"
    p.made.add("tool")


@probe("DELETE", "/v1/tools/{name}")
def delete_as_tools(p: Probe) -> None:
    names = p.names
    for name in (names.approval_tool, names.integration_tool):
        p.not_found(p.b("DELETE", f"/v1/tools/{name}"))
    response = p.b("DELETE", f"/v1/tools/{names.tool}")
    if "tool" in p.made:  # b's own tool of that name
        assert response.status_code == 204, response.text
        p.made.discard("tool")
    else:
        p.not_found(response)


# -- webhooks --------------------------------------------------------------------------------------

@probe("POST", "/v1/webhook-endpoints")
def register_an_endpoint(p: Probe) -> None:
    p.hidden(p.b("POST", "/v1/webhook-endpoints", body={"url": f"{HOOK_URL}a", "description": "b's"}))


@probe("GET", "/v1/webhook-endpoints")
def list_endpoints(p: Probe) -> None:
    p.hidden(p.b("GET", "/v1/webhook-endpoints"))


@probe("GET", "/v1/webhook-endpoints/{endpoint_id}")
def read_as_endpoint(p: Probe) -> None:
    p.not_found(p.b("GET", f"/v1/webhook-endpoints/{p.world.endpoint}"))


@probe("PATCH", "/v1/webhook-endpoints/{endpoint_id}")
def update_as_endpoint(p: Probe) -> None:
    change = p.draw(st.sampled_from([{"enabled": False}, {"url": f"{HOOK_URL}b"}, {"description": "b was here"},
                                     {"event_types": ["receipt.succeeded"]}]))
    p.not_found(p.b("PATCH", f"/v1/webhook-endpoints/{p.world.endpoint}", body=change))


@probe("DELETE", "/v1/webhook-endpoints/{endpoint_id}")
def delete_as_endpoint(p: Probe) -> None:
    p.not_found(p.b("DELETE", f"/v1/webhook-endpoints/{p.world.endpoint}"))


@probe("POST", "/v1/webhook-endpoints/{endpoint_id}/rotate-secret")
def rotate_as_endpoint_secret(p: Probe) -> None:
    p.not_found(p.b("POST", f"/v1/webhook-endpoints/{p.world.endpoint}/rotate-secret"))


@probe("GET", "/v1/webhook-endpoints/{endpoint_id}/deliveries")
def read_as_endpoint_deliveries(p: Probe) -> None:
    p.not_found(p.b("GET", f"/v1/webhook-endpoints/{p.world.endpoint}/deliveries"))


@probe("POST", "/v1/webhook-endpoints/{endpoint_id}/recover")
def recover_as_endpoint(p: Probe) -> None:
    p.not_found(p.b("POST", f"/v1/webhook-endpoints/{p.world.endpoint}/recover",
                    body={"since": "2000-01-01T00:00:00Z"}))


@probe("GET", "/v1/deliveries")
def list_deliveries_by_as_ids(p: Probe) -> None:
    for params in ({}, {"receipt_id": p.world.receipts["function"]}, {"status": "pending"}):
        p.hidden(p.b("GET", "/v1/deliveries", params=params))
    p.not_found(p.b("GET", "/v1/deliveries", params={"endpoint_id": p.world.endpoint}))


@probe("GET", "/v1/deliveries/{message_id}")
def read_as_deliveries(p: Probe) -> None:
    for message_id in p.world.deliveries:
        p.not_found(p.b("GET", f"/v1/deliveries/{message_id}"))


@probe("POST", "/v1/deliveries/{message_id}/retry")
def retry_as_deliveries(p: Probe) -> None:
    for message_id in p.world.deliveries:
        p.not_found(p.b("POST", f"/v1/deliveries/{message_id}/retry"))


@probe("GET", "/v1/webhook-secret")
def read_the_default_secret(p: Probe) -> None:
    assert p.hidden(p.b("GET", "/v1/webhook-secret"))["configured"] is ("secret" in p.made)


@probe("POST", "/v1/webhook-secret")
def create_the_default_secret(p: Probe) -> None:
    response = p.b("POST", "/v1/webhook-secret")
    if "secret" in p.made:
        assert_problem(response, 409)  # b's own, made before
    else:
        assert p.hidden(response)["secret"].startswith("whsec_")
    p.made.add("secret")


@probe("POST", "/v1/webhook-secret/rotate")
def rotate_the_default_secret(p: Probe) -> None:
    response = p.b("POST", "/v1/webhook-secret/rotate")
    if "secret" in p.made:
        p.hidden(response)
    else:
        p.not_found(response)  # a's secret is not b's


# -- integrations ----------------------------------------------------------------------------------

@probe("GET", "/v1/integrations")
def list_integrations(p: Probe) -> None:
    listed = p.hidden(p.b("GET", "/v1/integrations"))["data"]
    (crm,) = [entry for entry in listed if entry["provider"] == PROVIDER.provider]
    assert crm["configured"] is ("setup" in p.made)


@probe("PUT", "/v1/integrations/{provider}/setup")
def store_a_setup(p: Probe) -> None:
    assert p.hidden(p.b("PUT", f"/v1/integrations/{PROVIDER.provider}/setup", body={"region": "us"}))
    p.made.add("setup")


@probe("GET", "/v1/integrations/{provider}/setup")
def read_as_setup(p: Probe) -> None:
    response = p.b("GET", f"/v1/integrations/{PROVIDER.provider}/setup")
    if "setup" in p.made:
        assert "api_key" not in str(p.hidden(response))  # b's own setup: the region alone
    else:
        p.not_found(response)


@probe("DELETE", "/v1/integrations/{provider}/setup")
def delete_as_setup(p: Probe) -> None:
    response = p.b("DELETE", f"/v1/integrations/{PROVIDER.provider}/setup")
    if "setup" in p.made:
        assert response.status_code == 204, response.text
        p.made.discard("setup")
    else:
        p.not_found(response)


# -- MCP -------------------------------------------------------------------------------------------

@probe("*", "/mcp")
def use_mcp_and_as_session(p: Probe) -> None:
    world, names = p.world, p.names
    refused = world.mcp_post(world.b, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, world.mcp_session)
    assert refused.status_code == 404, refused.text  # a's session is no session of b's
    mine = world.mcp_open(world.b)
    listed = {tool["name"] for tool in world.mcp(world.b, "tools/list", session=mine)["result"]["tools"]}
    assert not listed & {names.approval_tool, names.integration_tool}
    assert (names.tool in listed) is ("tool" in p.made)
    for tool in (names.approval_tool, names.integration_tool):
        answer = world.mcp(world.b, "tools/call", {"name": tool, "arguments": names.arguments}, session=mine)
        assert answer["result"]["isError"] is True, answer
        others = {names.approval_tool, names.integration_tool} - {tool}
        assert not any(other in answer["result"]["content"][0]["text"] for other in others), answer


# -- the tests -------------------------------------------------------------------------------------

@pytest.fixture
def isolated(db: Database) -> Iterator[Gateway]:
    publish_provider(db)
    with running_gateway(db, outbound_allow_cidrs=["127.0.0.0/8"]) as running:
        yield running


def test_every_route_is_probed_or_holds_no_tenants_data(isolated: Gateway) -> None:
    served = app_routes(isolated.client.app)
    assert served - set(PROBES) - set(NOT_TENANT_SCOPED) == set(), "routes with no isolation probe"
    assert (set(PROBES) | set(NOT_TENANT_SCOPED)) - served == set(), "probes of routes the app does not serve"


CHARACTERS = st.characters(exclude_categories=("Cs", "Cc"))  # what can be stored (a NUL or a surrogate is a 422)


def text(**sizes: int) -> st.SearchStrategy[str]:
    return st.text(CHARACTERS, **sizes).filter(lambda value: MARK not in value)

NAMES = st.builds(
    Names,
    tool=st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True).filter(lambda name: name not in {"echo", "add",
                                                                                                 "charge"}),
    model=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,30}", fullmatch=True),
    trace_id=text(min_size=1, max_size=40),
    idempotency_key=st.from_regex(r"[!-~]{1,40}", fullmatch=True),
    arguments=st.dictionaries(text(max_size=8), st.one_of(
        st.integers(-(2 ** 63), 2 ** 63), text(max_size=20), st.booleans(), st.none(),
        st.floats(allow_nan=False, allow_infinity=False), st.lists(st.integers(), max_size=3)), max_size=4),
    metadata=st.dictionaries(text(min_size=1, max_size=8), st.integers(0, 1000) | text(max_size=8),
                             max_size=3),
)


@settings(max_examples=15, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(names=NAMES, order=st.permutations(sorted(PROBES)), data=st.data())
def test_what_one_tenant_makes_no_other_tenant_can_reach(isolated: Gateway, names: Names, order: list[Route],
                                                         data: st.DataObject) -> None:
    world = build_world(isolated.client, isolated.db, names)
    before = world.snapshot()
    sender_before = len(isolated.sender.sent)
    p = Probe(world, data.draw)
    for route in order:
        PROBES[route](p)
    assert world.snapshot() == before
    published = [message.args[0] for message in isolated.sender.sent[sender_before:] if message.args]
    assert not set(published) & world.ids(), "a message was sent for one of a's things"
