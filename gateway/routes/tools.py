"""The tool catalogue as the API shows it, natively or in OpenAI's and Anthropic's ``tools`` formats."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from gateway.deps import ServicesDep, TenantDep
from gateway.schemas import PROBLEMS
from receipts.records import ToolSpec

router = APIRouter(prefix="/v1", tags=["tools"])


def openai_tool(spec: ToolSpec) -> dict[str, Any]:
    return {"type": "function",
            "function": {"name": spec.name, "description": spec.description, "parameters": spec.parameters}}


def anthropic_tool(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}


@router.get("/tools", responses=PROBLEMS)
async def list_tools(services: ServicesDep, tenant: TenantDep,
                     format: Literal["native", "openai", "anthropic"] = "native") -> JSONResponse:
    """Every tool this tenant can call. ``format=openai|anthropic`` returns that vendor's ``tools`` array."""
    specs = await run_in_threadpool(services.catalogue.list, tenant.id)
    if format == "openai":
        return JSONResponse([openai_tool(spec) for spec in specs])
    if format == "anthropic":
        return JSONResponse([anthropic_tool(spec) for spec in specs])
    return JSONResponse({"data": [spec.to_api() for spec in specs], "next_cursor": None})


@router.get("/tools/{name}", responses=PROBLEMS)
async def get_tool(name: str, services: ServicesDep, tenant: TenantDep) -> JSONResponse:
    """One tool: kind, description, JSON Schema of its arguments, effect, idempotency, timeout."""
    spec = await run_in_threadpool(services.catalogue.find, tenant.id, name)
    return JSONResponse(spec.to_api())
