"""Integration providers and each tenant's stored setup of them (credentials encrypted, never shown).

``GET /v1/integrations`` lists the providers workers published, with their methods and schemas;
``PUT /v1/integrations/{provider}/setup`` stores a setup (validated against the provider's setup
schema); ``GET`` shows which fields are set, never their values; ``DELETE`` forgets it. Without
``TOOLRELAY_SECRET_KEY`` a setup can be neither stored nor read (503); one encrypted with another
key is a 409 (gateway/problems.py maps both).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from starlette.responses import Response

from gateway.bodies import JSONBodyRoute
from gateway.deps import TenantDep, services_of
from gateway.problems import Problem
from gateway.responses import JSONResponse
from gateway.schemas import PROBLEMS
from gateway.services import Services
from receipts import patterns
from receipts.catalogue import providers
from receipts.catalogue import setups as setup_ops
from receipts.catalogue.setups import IntegrationSetups
from receipts.records import iso

router = APIRouter(prefix="/v1", tags=["integrations"], route_class=JSONBodyRoute)


def setups(services: Services) -> IntegrationSetups:
    return IntegrationSetups(services.box)


def setup_schema_for_put(setup: dict[str, Any]) -> dict[str, Any]:
    """The provider's setup schema as a PUT is checked: known fields with valid values, none required.

    Required fields may also come from a tool definition, so they are checked when a call runs.
    """
    schema = {key: value for key, value in setup.items() if key != "required"}
    schema["additionalProperties"] = False
    return schema


@router.get("/integrations", responses=PROBLEMS)
async def list_integrations(request: Request, tenant: TenantDep) -> JSONResponse:
    """Every provider workers can run: methods with their argument and output schemas, the setup schema
    (``writeOnly`` fields are secrets), and whether this tenant stored a setup."""
    services = services_of(request)
    configured = await services.db.arun(setup_ops.configured(tenant.id))
    found: dict[str, dict[str, Any]] = {}
    for method in await services.db.arun(providers.all_methods()):
        entry = found.setdefault(method.provider, {
            "provider": method.provider,
            "description": method.provider_description,
            "setup": method.setup,
            "secret_fields": method.secret_fields,
            "configured": method.provider in configured,
            "setup_updated_at": iso(configured.get(method.provider)),
            "methods": [],
        })
        entry["methods"].append(method.to_api())
    return JSONResponse({"data": list(found.values()), "next_cursor": None})


@router.put("/integrations/{provider}/setup", responses=PROBLEMS)
async def put_setup(provider: str, request: Request, tenant: TenantDep,
                    config: Annotated[dict[str, Any], Body()]) -> JSONResponse:
    """Store (replace) this tenant's setup of ``provider``. The answer names the fields set, not their values."""
    services = services_of(request)
    methods = await services.db.arun(providers.methods(provider))  # NotFound -> 404
    validator = patterns.validator(setup_schema_for_put(methods[0].setup))
    errors = [{"field": ".".join(["setup", *map(str, err.absolute_path)]), "message": err.message}
              for err in sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))]
    if errors:
        raise Problem(422, f"the setup does not match the setup schema of {provider!r}", errors=errors)
    summary = await services.db.arun(setups(services).put(tenant.id, provider, config))
    return JSONResponse(summary.to_api())


@router.get("/integrations/{provider}/setup", responses=PROBLEMS)
async def get_setup(provider: str, request: Request, tenant: TenantDep) -> JSONResponse:
    """Which fields of this tenant's setup are set (404 when none is stored). Values are never returned."""
    services = services_of(request)
    summary = await services.db.arun(setups(services).summary(tenant.id, provider))
    return JSONResponse(summary.to_api())


@router.delete("/integrations/{provider}/setup", status_code=204, responses=PROBLEMS)
async def delete_setup(provider: str, request: Request, tenant: TenantDep) -> Response:
    """Forget this tenant's setup of ``provider``; its integration tools then fail with invalid_arguments."""
    services = services_of(request)
    await services.db.arun(setup_ops.delete(tenant.id, provider))
    return Response(status_code=204)
