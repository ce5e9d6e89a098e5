"""Webhook endpoints, their deliveries log, manual retry and recovery, and the tenant's default secret.

Secrets are returned only by the calls that create or rotate them. The gateway never sends webhooks
itself: after a retry or recovery it nudges the dispatcher by task name.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from gateway.bodies import JSONBodyRoute
from gateway.deps import TenantDep, services_of
from gateway.problems import Problem
from gateway.responses import JSONResponse
from gateway.schemas import PROBLEMS
from gateway.services import Services
from gateway.webhook_schemas import (
    DefaultSecretBody,
    DefaultSecretCreated,
    DeliveryBody,
    DeliveryList,
    EndpointBody,
    EndpointCreate,
    EndpointCreated,
    EndpointList,
    EndpointUpdate,
    RecoverRequest,
    RecoverResult,
    SecretRotated,
)
from gateway.webhook_urls import check_url
from receipts.records import iso
from receipts.webhooks import endpoints
from receipts.webhooks.nudges import publish_deliver

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1", tags=["webhooks"], route_class=JSONBodyRoute)

Limit = Annotated[int, Query(ge=1, le=200)]


def nudge(services: Services) -> None:
    try:
        publish_deliver(services.sender)
    except Exception as exc:  # noqa: BLE001 - the periodic pump delivers anyway
        log.warning("could not nudge the webhook dispatcher (%s)", exc)


def utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


# -- endpoints ---------------------------------------------------------------------------------

@router.post("/webhook-endpoints", status_code=201, response_model=EndpointCreated, responses=PROBLEMS)
async def create_endpoint(body: EndpointCreate, request: Request, tenant: TenantDep) -> JSONResponse:
    """Register an endpoint. The answer carries its signing ``secret``: store it, it is not shown again."""
    services = services_of(request)
    await run_in_threadpool(check_url, services, body.url)
    endpoint, secret = await services.db.arun(services.endpoints.create_endpoint(
        tenant.id, body.url, event_types=body.event_types, description=body.description, enabled=body.enabled))
    return JSONResponse({**endpoint.to_api(), "secret": secret}, status_code=201,
                        headers={"Location": f"/v1/webhook-endpoints/{endpoint.id}"})


@router.get("/webhook-endpoints", response_model=EndpointList, responses=PROBLEMS)
async def list_endpoints(request: Request, tenant: TenantDep, limit: Limit = 50,
                         cursor: str | None = None) -> JSONResponse:
    """The tenant's endpoints, newest first (without secrets)."""
    services = services_of(request)
    page = await services.db.arun(endpoints.list_endpoints(tenant.id, limit=limit, cursor=cursor))
    return JSONResponse({"data": [e.to_api() for e in page.items], "next_cursor": page.next_cursor})


@router.get("/webhook-endpoints/{endpoint_id}", response_model=EndpointBody, responses=PROBLEMS)
async def get_endpoint(endpoint_id: str, request: Request, tenant: TenantDep) -> JSONResponse:
    """One endpoint, with why it is disabled (if it is) and since when it has been failing."""
    services = services_of(request)
    endpoint = await services.db.arun(endpoints.get_endpoint(tenant.id, endpoint_id))
    return JSONResponse(endpoint.to_api())


@router.patch("/webhook-endpoints/{endpoint_id}", response_model=EndpointBody, responses=PROBLEMS)
async def update_endpoint(endpoint_id: str, body: EndpointUpdate, request: Request,
                          tenant: TenantDep) -> JSONResponse:
    """Change the url, event_types, description or enabled. Enabling clears the disabled reason."""
    services = services_of(request)
    changes = {name: getattr(body, name) for name in body.model_fields_set}
    for name in ("url", "enabled", "description", "event_types"):
        if name in changes and changes[name] is None:
            raise Problem.invalid(name, "may not be null")
    if "url" in changes:
        await run_in_threadpool(check_url, services, changes["url"])
    endpoint = await services.db.arun(endpoints.update_endpoint(tenant.id, endpoint_id, **changes))
    return JSONResponse(endpoint.to_api())


@router.delete("/webhook-endpoints/{endpoint_id}", status_code=204, responses=PROBLEMS)
async def delete_endpoint(endpoint_id: str, request: Request, tenant: TenantDep) -> Response:
    """Remove the endpoint, its pending messages and its deliveries log."""
    services = services_of(request)
    await services.db.arun(endpoints.delete_endpoint(tenant.id, endpoint_id))
    return Response(status_code=204)


@router.post("/webhook-endpoints/{endpoint_id}/rotate-secret", response_model=SecretRotated, responses=PROBLEMS)
async def rotate_endpoint_secret(endpoint_id: str, request: Request, tenant: TenantDep) -> JSONResponse:
    """A new signing secret. The previous one stays valid for the grace period (both signatures are sent)."""
    services = services_of(request)
    _, secret, expiry = await services.db.arun(services.endpoints.rotate_endpoint_secret(
        tenant.id, endpoint_id, grace_s=services.settings.webhook_secret_grace_s))
    return JSONResponse({"endpoint_id": endpoint_id, "secret": secret, "previous_secret_expires_at": iso(expiry)})


@router.get("/webhook-endpoints/{endpoint_id}/deliveries", response_model=DeliveryList, responses=PROBLEMS)
async def endpoint_deliveries(endpoint_id: str, request: Request, tenant: TenantDep,
                              status: str | None = None, limit: Limit = 50, cursor: str | None = None) -> JSONResponse:
    """The endpoint's messages, newest first, each with every attempt (time, status code, latency, response)."""
    services = services_of(request)
    page = await services.db.arun(endpoints.deliveries(tenant.id, endpoint_id=endpoint_id, status=status,
                                                       limit=limit, cursor=cursor))
    return JSONResponse({"data": [d.to_api() for d in page.items], "next_cursor": page.next_cursor})


@router.post("/webhook-endpoints/{endpoint_id}/recover", status_code=202, response_model=RecoverResult,
             responses=PROBLEMS)
async def recover(endpoint_id: str, body: RecoverRequest, request: Request, tenant: TenantDep) -> JSONResponse:
    """Send again every failed message of the endpoint created since ``since`` (and before ``until``)."""
    services = services_of(request)
    count = await services.db.arun(endpoints.recover(tenant.id, endpoint_id, since=utc(body.since),
                                                     until=utc(body.until) if body.until else None))
    if count:
        nudge(services)
    return JSONResponse({"recovered": count}, status_code=202)


# -- deliveries --------------------------------------------------------------------------------

@router.get("/deliveries", response_model=DeliveryList, responses=PROBLEMS)
async def list_deliveries(request: Request, tenant: TenantDep, receipt_id: str | None = None,
                          endpoint_id: str | None = None, status: str | None = None, limit: Limit = 50,
                          cursor: str | None = None) -> JSONResponse:
    """Messages of every endpoint and of calls' own webhook_url, filtered by receipt, endpoint or status."""
    services = services_of(request)
    page = await services.db.arun(endpoints.deliveries(tenant.id, endpoint_id=endpoint_id, receipt_id=receipt_id,
                                                       status=status, limit=limit, cursor=cursor))
    return JSONResponse({"data": [d.to_api() for d in page.items], "next_cursor": page.next_cursor})


@router.get("/deliveries/{message_id}", response_model=DeliveryBody, responses=PROBLEMS)
async def get_delivery(message_id: str, request: Request, tenant: TenantDep) -> JSONResponse:
    """One message with its attempts."""
    services = services_of(request)
    delivery = await services.db.arun(endpoints.delivery(tenant.id, message_id))
    return JSONResponse(delivery.to_api())


@router.post("/deliveries/{message_id}/retry", status_code=202, response_model=DeliveryBody, responses=PROBLEMS)
async def retry_delivery(message_id: str, request: Request, tenant: TenantDep) -> JSONResponse:
    """Send the message again now (same webhook-id). 409 if its endpoint is disabled."""
    services = services_of(request)
    delivery = await services.db.arun(endpoints.retry(tenant.id, message_id))
    nudge(services)
    return JSONResponse(delivery.to_api(), status_code=202)


# -- the tenant's default secret ---------------------------------------------------------------

@router.get("/webhook-secret", response_model=DefaultSecretBody, responses=PROBLEMS)
async def get_default_secret(request: Request, tenant: TenantDep) -> JSONResponse:
    """Whether the tenant has a default secret (it signs deliveries to a call's own webhook_url)."""
    services = services_of(request)
    infos = await services.db.arun(endpoints.default_secrets(tenant.id))
    return JSONResponse({"configured": bool(infos), "secrets": [info.to_api() for info in infos]})


@router.post("/webhook-secret", status_code=201, response_model=DefaultSecretCreated, responses=PROBLEMS)
async def create_default_secret(request: Request, tenant: TenantDep) -> JSONResponse:
    """Create the default secret, shown this once. 409 if there is one already (rotate it instead)."""
    services = services_of(request)
    secret, info = await services.db.arun(services.endpoints.create_default_secret(tenant.id))
    return JSONResponse({"secret": secret, "created_at": iso(info.created_at), "previous_secret_expires_at": None},
                        status_code=201)


@router.post("/webhook-secret/rotate", response_model=DefaultSecretCreated, responses=PROBLEMS)
async def rotate_default_secret(request: Request, tenant: TenantDep) -> JSONResponse:
    """A new default secret; the previous one keeps signing for the grace period. 404 if there is none."""
    services = services_of(request)
    secret, info, expiry = await services.db.arun(services.endpoints.rotate_default_secret(
        tenant.id, grace_s=services.settings.webhook_secret_grace_s))
    return JSONResponse({"secret": secret, "created_at": iso(info.created_at),
                         "previous_secret_expires_at": iso(expiry)})
