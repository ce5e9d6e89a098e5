"""The tool catalogue as the API shows it (natively, or in OpenAI's and Anthropic's ``tools`` formats),
and the tools a tenant defines itself (function, api_call, integration).

A key limited to some tools sees only those (any other is a 404) and defines none (403): defining
or replacing a tool changes it for the whole tenant.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from agents.tools import anthropic_tool, openai_tool
from gateway.bodies import JSONBodyRoute
from gateway.deps import CallerDep, TenantDep, services_of
from gateway.problems import Problem
from gateway.responses import JSONResponse
from gateway.schemas import PROBLEMS
from gateway.services import Services
from gateway.tool_definitions import IntegrationTool, ToolDefinitions, parse_definition
from receipts.catalogue import providers
from receipts.catalogue import tools as catalogue
from receipts.catalogue.tools import GLOBAL
from receipts.errors import NotFound
from receipts.records import Tenant, ToolSpec

router = APIRouter(prefix="/v1", tags=["tools"], route_class=JSONBodyRoute)


@router.get("/tools", responses=PROBLEMS)
async def list_tools(request: Request, caller: CallerDep,
                     format: Literal["native", "openai", "anthropic"] = "native") -> JSONResponse:
    """Every tool this key can call. ``format=openai|anthropic`` returns that vendor's ``tools`` array."""
    services = services_of(request)
    specs = caller.visible(await services.db.arun(catalogue.list_tools(caller.tenant.id)))
    if format == "openai":
        return JSONResponse([openai_tool(spec) for spec in specs])
    if format == "anthropic":
        return JSONResponse([anthropic_tool(spec) for spec in specs])
    return JSONResponse({"data": [spec.to_api() for spec in specs], "next_cursor": None})


@router.get("/tools/{name}", responses=PROBLEMS)
async def get_tool(name: str, request: Request, caller: CallerDep) -> JSONResponse:
    """One tool: kind, description, JSON Schema of its arguments, effect, idempotency, timeout."""
    services = services_of(request)
    if not caller.may_use(name):
        raise NotFound(f"no tool named {name!r}")
    spec = await services.db.arun(catalogue.find(caller.tenant.id, name))
    return JSONResponse(spec.to_api())


async def _define(services: Services, tenant: Tenant, data: dict[str, Any], *, replace: bool,
                  name: str | None = None) -> ToolSpec:
    """Validate and store a tenant's tool; built-in (global) names cannot be taken."""
    body = parse_definition(data)
    if name is not None and body.name != name:
        raise Problem.invalid("name", "must match the name in the URL")
    method = None
    if isinstance(body, IntegrationTool):
        try:
            method = await services.db.arun(providers.find(body.provider, body.method))
        except NotFound as exc:
            field = "method" if "has no method" in exc.message else "provider"
            raise Problem.invalid(field, exc.message) from None
    # Building resolves hosts (the SSRF guard's early check): off the event loop.
    spec = await run_in_threadpool(ToolDefinitions(services.settings).build, tenant.id, body, method)
    try:
        existing = await services.db.arun(catalogue.find(tenant.id, spec.name))
    except NotFound:
        existing = None
    if existing is not None and existing.tenant_id == GLOBAL:
        raise Problem(409, f"{spec.name!r} is a built-in tool; choose another name",
                      errors=[{"field": "name", "message": "taken by a built-in tool"}])
    if replace:
        await services.db.arun(catalogue.publish([spec]))
    else:
        await services.db.arun(catalogue.add(spec))  # Conflict (409) when the tenant already has one
    services.tools.forget(tenant.id, spec.name)
    return spec


@router.post("/tools", status_code=201, responses=PROBLEMS)
async def create_tool(request: Request, tenant: TenantDep,
                      body: Annotated[dict[str, Any], Body()]) -> JSONResponse:
    """Define a tool for this tenant (409 if the name is taken). The body's ``kind`` decides its shape:

    * ``function``: ``{name, description, parameters, timeout_s?}``, run by the client;
    * ``api_call``: ``{name, description, parameters, request: {method, url, headers?, query?, body?,
      timeout_s?, follow_redirects?}, effect?, idempotent?}``; credential headers (``Authorization``,
      ``X-Api-Key``, ``Cookie``, any name with auth, token, secret, key...) are stored encrypted and shown as
      ``********`` (503 when ``TOOLRELAY_SECRET_KEY`` is not set);
    * ``integration``: ``{name, provider, method, arguments?, description?, effect?, idempotent?}``.
    """
    services = services_of(request)
    spec = await _define(services, tenant, body, replace=False)
    return JSONResponse(spec.to_api(), status_code=201, headers={"Location": f"/v1/tools/{spec.name}"})


@router.put("/tools/{name}", responses=PROBLEMS)
async def replace_tool(name: str, request: Request, tenant: TenantDep,
                       body: Annotated[dict[str, Any], Body()]) -> JSONResponse:
    """Define or replace this tenant's tool ``name`` (same body as POST). Accepted calls keep their contract."""
    services = services_of(request)
    spec = await _define(services, tenant, body, replace=True, name=name)
    return JSONResponse(spec.to_api())


@router.delete("/tools/{name}", status_code=204, responses=PROBLEMS)
async def delete_tool(name: str, request: Request, tenant: TenantDep) -> Response:
    """Remove a tool this tenant defined (built-in tools and other tenants' tools are a 404)."""
    services = services_of(request)
    await services.db.arun(catalogue.remove(tenant.id, name))
    services.tools.forget(tenant.id, name)
    return Response(status_code=204)
