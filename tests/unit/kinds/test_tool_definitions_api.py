"""POST/PUT/DELETE /v1/tools: function, api_call and integration tools, validated before anything is stored."""

from __future__ import annotations

from typing import Any

import pytest

from receipts.catalogue import tools as catalogue
from receipts.records import ToolSpec
from tests.support import sql
from tests.unit.kinds.conftest import Gateway, assert_problem

PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
          "additionalProperties": False}


def api_call(**overrides: Any) -> dict[str, Any]:
    return {"kind": "api_call", "name": "get_city", "description": "Look a city up.", "parameters": PARAMS,
            "request": {"method": "GET", "url": "https://93.184.215.14/cities/{city}",
                        "headers": {"Authorization": "Bearer s3cret", "Accept": "application/json"}}, **overrides}


def tenant_tool_count(gateway: Gateway) -> int:
    return int(sql.value(gateway.db, "SELECT count(*) FROM tools WHERE tenant_id = %(tenant_id)s",
                         tenant_id=gateway.tenant_id))


def test_function_tool_is_defined_and_listed_with_its_contract(gateway: Gateway) -> None:
    response = gateway.post("/v1/tools", {"kind": "function", "name": "approve", "description": "Ask a human.",
                                          "parameters": PARAMS, "timeout_s": 3600})
    assert response.status_code == 201, response.text
    assert response.headers["location"] == "/v1/tools/approve"
    tool = gateway.get("/v1/tools/approve").json()
    assert (tool["kind"], tool["effect"], tool["idempotent"], tool["timeout_s"]) == ("function", "write", False, 3600)
    assert tool["parameters"] == PARAMS


def test_api_call_tool_masks_credentials_and_defaults_its_effect_from_the_method(gateway: Gateway) -> None:
    created = gateway.post("/v1/tools", api_call())
    assert created.status_code == 201, created.text
    listed = {t["name"]: t for t in gateway.get("/v1/tools").json()["data"]}
    for shown in (created.json(), listed["get_city"], gateway.get("/v1/tools/get_city").json()):
        assert shown["definition"]["request"]["headers"] == {"Authorization": "********",
                                                            "Accept": "application/json"}
        assert (shown["kind"], shown["effect"], shown["idempotent"]) == ("api_call", "read", True)
    assert "s3cret" not in gateway.get("/v1/tools").text
    post = gateway.post("/v1/tools", api_call(name="make_city", request={"method": "POST",
                                                                          "url": "https://93.184.215.14/c"}))
    assert (post.json()["effect"], post.json()["idempotent"]) == ("write", False)


def test_integration_tool_hides_fixed_arguments_from_callers(gateway: Gateway) -> None:
    response = gateway.post("/v1/tools", {"kind": "integration", "name": "wiki", "provider": "wikipedia",
                                          "method": "search", "arguments": {"limit": 3}})
    assert response.status_code == 201, response.text
    tool = response.json()
    assert tool["definition"] == {"provider": "wikipedia", "method": "search", "arguments": {"limit": 3}}
    assert set(tool["parameters"]["properties"]) == {"query"}
    assert (tool["effect"], tool["idempotent"]) == ("read", True)
    mail = gateway.post("/v1/tools", {"kind": "integration", "name": "mail", "provider": "email", "method": "send"})
    assert (mail.json()["effect"], mail.json()["idempotent"]) == ("write", False)


def test_catalogue_formats_include_every_kind(gateway: Gateway) -> None:
    gateway.post("/v1/tools", {"kind": "function", "name": "approve", "parameters": PARAMS})
    gateway.post("/v1/tools", api_call())
    gateway.post("/v1/tools", {"kind": "integration", "name": "wiki", "provider": "wikipedia", "method": "search"})
    native = {t["name"]: t["kind"] for t in gateway.get("/v1/tools").json()["data"]}
    assert {native[n] for n in ("approve", "get_city", "wiki", "echo", "receipts_get")} == {
        "function", "api_call", "integration", "python", "system"}
    assert "email.send" not in native  # provider templates are not callable tools
    openai = gateway.get("/v1/tools", format="openai").json()
    anthropic = gateway.get("/v1/tools", format="anthropic").json()
    assert {t["function"]["name"] for t in openai} == set(native)
    assert {t["name"] for t in anthropic} == set(native)
    wiki = next(t for t in anthropic if t["name"] == "wiki")
    assert wiki["input_schema"]["required"] == ["query"]


@pytest.mark.parametrize(("body", "field"), [
    ({"kind": "function", "name": "Bad-Name"}, "name"),
    ({"kind": "function", "name": "f", "parameters": {"type": "objekt"}}, "parameters.type"),
    ({"kind": "function", "name": "f", "parameters": {"type": "array"}}, "parameters.type"),
    ({"kind": "function", "name": "f", "parameters": {"type": "object", "properties": {"a": {"minimum": "x"}}}},
     "parameters.properties.a.minimum"),
    ({"kind": "function", "name": "f", "timeout_s": 40 * 24 * 3600}, "timeout_s"),
    ({"kind": "teleport", "name": "f"}, "kind"),
    (api_call(request={"method": "GET", "url": "http://169.254.169.254/latest/meta-data"}), "request.url"),
    (api_call(request={"method": "GET", "url": "http://10.0.0.5/x"}), "request.url"),
    (api_call(request={"method": "GET", "url": "http://127.0.0.1:8080/x"}), "request.url"),
    (api_call(request={"method": "GET", "url": "https://{host}/x"}), "request.url"),
    (api_call(request={"method": "GET", "url": "https://[93.184.215.14/x"}), "request.url"),  # urlsplit raises
    (api_call(request={"method": "GET", "url": "https://93.184.215.14/{nope}"}), "request"),
    (api_call(request={"url": "https://93.184.215.14/x", "headers": {"X-Key": "{city}"}}), "request.headers.X-Key"),
    # a $ref that leads nowhere, or out of the schema: every call would fail (found by fuzzing: a 500 each)
    ({"kind": "function", "name": "f", "parameters": {"type": "object", "properties": {"a": {"$ref": "#/nope"}}}},
     "parameters.properties.a.$ref"),
    ({"kind": "function", "name": "f", "parameters": {"type": "object", "anyOf": [{"$ref": "#/$defs/x"}]}},
     "parameters.anyOf.0.$ref"),
    ({"kind": "function", "name": "f", "parameters": {"type": "object",
                                                      "properties": {"a": {"$ref": "https://93.184.215.14/s.json"}}}},
     "parameters.properties.a.$ref"),
    ({"kind": "integration", "name": "i", "provider": "fax", "method": "send"}, "provider"),
    ({"kind": "integration", "name": "i", "provider": "email", "method": "fax"}, "method"),
    ({"kind": "integration", "name": "i", "provider": "email", "method": "send", "arguments": {"password": "x"}},
     "arguments.password"),
    ({"kind": "integration", "name": "i", "provider": "email", "method": "send", "arguments": {"colour": "x"}},
     "arguments.colour"),
    ({"kind": "integration", "name": "i", "provider": "email", "method": "send", "arguments": {"port": "x"}},
     "arguments.port"),
    ({"kind": "integration", "name": "i", "provider": "mcp", "method": "list_tools",
      "arguments": {"url": "http://127.0.0.1:9/mcp"}}, "arguments.url"),
    ({"kind": "integration", "name": "i", "provider": "mcp", "method": "list_tools",
      "arguments": {"url": "http://[::1/mcp"}}, "arguments.url"),
])
def test_invalid_definitions_are_refused_and_nothing_is_stored(gateway: Gateway, body: dict[str, Any],
                                                               field: str) -> None:
    assert_problem(gateway.post("/v1/tools", body), 422, field)
    assert tenant_tool_count(gateway) == 0


def test_references_within_the_schema_are_followed_when_calls_are_checked(gateway: Gateway) -> None:
    parameters = {"type": "object", "$defs": {"city": {"type": "string", "minLength": 2},
                                              "place": {"$anchor": "work", "type": "string"}},
                  "properties": {"home": {"$ref": "#/$defs/city"}, "work": {"$ref": "#work"},
                                 "note": {"const": {"$ref": "#/nowhere"}},  # data, not a reference
                                 "nested": {"$id": "https://example.com/nested", "$defs": {"n": {"type": "integer"}},
                                            "$ref": "#/$defs/n"}}}
    assert gateway.post("/v1/tools", {"kind": "function", "name": "commute", "parameters": parameters}).status_code \
        == 201
    assert gateway.post("/v1/tool-calls", {"tool": "commute", "arguments": {"home": "Lyon", "nested": 2}}) \
        .status_code == 202
    assert_problem(gateway.post("/v1/tool-calls", {"tool": "commute", "arguments": {"home": "L"}}), 422,
                   "arguments.home")


def test_a_stored_schema_whose_reference_leads_nowhere_is_a_422_not_a_500(gateway: Gateway) -> None:
    broken = ToolSpec(name="broken", kind="function", description="Defined before references were checked.",
                      parameters={"type": "object", "properties": {"a": {"$ref": "#/nope"}}},
                      tenant_id=gateway.tenant_id)
    gateway.db.run(catalogue.publish([broken]))
    body = assert_problem(gateway.post("/v1/tool-calls", {"tool": "broken", "arguments": {"a": 1}}), 422, "arguments")
    assert "does not resolve" in body["errors"][0]["message"]
    assert tenant_tool_count(gateway) == 1 and sql.value(gateway.db, "SELECT count(*) FROM receipts") == 0


def test_names_cannot_be_taken_twice_or_from_built_in_tools(gateway: Gateway) -> None:
    assert gateway.post("/v1/tools", {"kind": "function", "name": "approve"}).status_code == 201
    assert_problem(gateway.post("/v1/tools", {"kind": "function", "name": "approve"}), 409)
    assert_problem(gateway.post("/v1/tools", {"kind": "function", "name": "echo"}), 409, "name")
    assert_problem(gateway.post("/v1/tools", {"kind": "function", "name": "receipts_get"}), 409, "name")
    assert tenant_tool_count(gateway) == 1


def test_put_replaces_and_delete_removes_at_once_despite_the_cache(gateway: Gateway) -> None:
    gateway.post("/v1/tools", {"kind": "function", "name": "approve"})
    call = {"tool": "approve", "arguments": {}}
    assert gateway.post("/v1/tool-calls", call).status_code == 202  # the gateway has now cached the tool
    replaced = gateway.put("/v1/tools/approve", {"kind": "function", "name": "approve", "parameters": PARAMS})
    assert replaced.status_code == 200 and replaced.json()["parameters"] == PARAMS
    assert_problem(gateway.post("/v1/tool-calls", call), 422, "arguments")  # the new schema applies at once
    assert_problem(gateway.put("/v1/tools/other", {"kind": "function", "name": "approve"}), 422, "name")
    assert gateway.delete("/v1/tools/approve").status_code == 204
    assert_problem(gateway.post("/v1/tool-calls", call), 422, "tool")
    assert_problem(gateway.delete("/v1/tools/approve"), 404)


def test_another_tenant_neither_sees_nor_removes_a_tenants_tools(gateway: Gateway) -> None:
    gateway.post("/v1/tools", api_call())
    assert_problem(gateway.get("/v1/tools/get_city", key=gateway.other_key), 404)
    assert "get_city" not in {t["name"] for t in gateway.get("/v1/tools", key=gateway.other_key).json()["data"]}
    assert_problem(gateway.delete("/v1/tools/get_city", key=gateway.other_key), 404)
    assert_problem(gateway.post("/v1/tool-calls", {"tool": "get_city", "arguments": {"city": "x"}},
                                key=gateway.other_key), 422, "tool")
    assert_problem(gateway.delete("/v1/tools/echo"), 404)  # built-in tools cannot be removed
    assert gateway.get("/v1/tools/get_city").status_code == 200
