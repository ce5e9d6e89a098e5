"""FastAPI dependencies: the services of this app and the calling tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gateway.auth import UNAUTHORIZED, bearer_key
from gateway.problems import Problem
from gateway.services import Services
from receipts.records import Tenant


def services_of(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


async def get_services(request: Request) -> Services:
    # async on purpose: FastAPI runs a plain ``def`` dependency on a worker thread, a hop per request.
    return services_of(request)


async def get_tenant(request: Request) -> Tenant:
    tenant = await services_of(request).keys.lookup(bearer_key(request))
    if tenant is None:
        raise Problem(401, "invalid API key", headers=UNAUTHORIZED)
    return tenant


ServicesDep = Annotated[Services, Depends(get_services)]
TenantDep = Annotated[Tenant, Depends(get_tenant)]
