"""FastAPI dependencies: who is calling, and the services of this app.

Routes take the app's services from their request (:func:`services_of`), not as a dependency: each
dependency costs FastAPI a solve per request (10-16 µs here, near a tenth of a receipt read).

* ``CallerDep``: the caller (its tenant and its key's scopes), for routes that apply the key's tool
  scope themselves: submitting, batches, receipts, the catalogue.
* ``TenantDep``: the caller's tenant, for routes that act on the whole tenant (defining tools,
  webhook endpoints and secrets, integration setups): a key limited to some tools gets 403 there,
  as on any route that did not opt in to scoped keys by taking ``CallerDep``.

Both refuse a read-only key (403) on anything but GET, HEAD and OPTIONS: every API route that changes
something takes another method, so a new route cannot forget the check. Both then refuse (422) a
request whose path, query or JSON body holds a value PostgreSQL cannot store (:mod:`receipts.storable`:
a NUL, a lone surrogate, a number that is not finite), before the route runs and so before anything
is written: one check for every route, whatever its body's model.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from gateway.auth import authenticate
from gateway.problems import Problem
from gateway.services import Services
from receipts import storable
from receipts.records import Caller, Tenant
from receipts.telemetry import logfields

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def services_of(request: HTTPConnection) -> Services:
    """The services of the app serving ``request`` (set up in its lifespan)."""
    return request.app.state.services  # type: ignore[no-any-return]


async def caller_of(request: HTTPConnection) -> Caller:
    """The caller of a request to this app (any route or mounted app), its key checked and rate-limited.

    Raises:
        Problem: 401 for a missing, unknown, revoked or expired key; 429 over the key's rate limit.
    """
    services = services_of(request)
    caller = await authenticate(services.keys, services.buckets, request)
    logfields.bind(tenant=caller.tenant.id)  # for the rest of this request (its task's own context)
    return caller


async def allowed_caller(request: Request) -> Caller:
    """The caller, once its key may make this request at all: 401, 429, and 403 for a read-only key
    on a method that changes something.

    Also the first thing a ``/v1`` request whose body cannot be read is told (gateway/problems.py):
    FastAPI reads a route's body before it solves the dependencies, and who asks comes first.
    """
    caller = await caller_of(request)
    if caller.read_only and request.method not in SAFE_METHODS:
        raise Problem(403, "this API key is read-only: it may read, but not submit, cancel, define or change anything")
    return caller


async def get_caller(request: Request) -> Caller:
    caller = await allowed_caller(request)
    await check_storable(request)
    return caller


async def check_storable(request: Request) -> None:
    """InvalidInput (422) if the request's path, query or JSON body holds a value that cannot be stored.

    FastAPI has parsed the body of a route that takes one before it solves the dependencies, and the
    request keeps what it parsed: reading it here parses nothing again. A body that is not JSON is
    left to the route (400 where it reads one, ignored where it reads none).
    """
    storable.check_texts(request.path_params)
    if request.scope.get("query_string"):
        storable.check_texts(request.query_params.multi_items())
    if request.method in BODY_METHODS and await request.body():
        try:
            body = await request.json()
        except (ValueError, RecursionError):
            return
        storable.check(body)


async def get_tenant(request: Request) -> Tenant:
    caller = await get_caller(request)  # called, not a sub-dependency: one solve less per request
    if caller.scoped:
        raise Problem(403, "this API key is limited to some tools; this needs a key for the whole tenant")
    return caller.tenant


CallerDep = Annotated[Caller, Depends(get_caller)]
TenantDep = Annotated[Tenant, Depends(get_tenant)]
