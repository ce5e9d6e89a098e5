"""Batches: a model's tool calls in its own format in, the messages to append out."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import APIRouter, Request

from gateway.batches import accept_batch
from gateway.bodies import JSONBodyRoute
from gateway.deps import CallerDep, get_caller, services_of
from gateway.params import IDEMPOTENCY_KEY, WAIT_S, Param, documented
from gateway.responses import JSONResponse
from gateway.schemas import PROBLEMS, BatchBody, BatchRequest
from gateway.services import Services
from gateway.waiters import wait_until
from receipts.errors import NotFound
from receipts.records import Batch, BatchCall, Caller
from receipts.store import batches
from receipts.telemetry import tracing

router = APIRouter(prefix="/v1", tags=["batches"], route_class=JSONBodyRoute)


def in_scope(caller: Caller, batch: Batch, calls: Sequence[BatchCall]) -> Batch:
    """``batch`` if the caller's key may see every call in it: each to a tool the key may use, or refused as
    outside its scope (what a limited key's own batch holds); NotFound (404) if not, as for another tenant's."""
    if caller.scoped and not all(caller.may_use(call.tool) or (call.error or {}).get("code") == "forbidden"
                                 for call in calls):
        raise NotFound(f"no batch {batch.id}")
    return batch


async def read_batch(services: Services, caller: Caller, batch_id: str, wait_s: float) -> Batch:
    """The caller's batch once completed, or as it stands after ``wait_s`` (NotFound outside its tenant or,
    for a key limited to tools, if the batch ran a tool the key may not use)."""

    async def read() -> Batch:
        return in_scope(caller, *(await services.db.arun(batches.get(caller.tenant.id, batch_id))))

    return await wait_until(services.waiters, batch_id, read, lambda batch: batch.completed,
                            min(wait_s, services.settings.long_poll_max_s))


def batch_response(batch: Batch, replayed: bool = False) -> JSONResponse:
    headers = {"Location": f"/v1/batches/{batch.id}"}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return JSONResponse(batch.to_api(), status_code=200 if batch.completed else 202, headers=headers)


@router.post("/batches", status_code=202, response_model=BatchBody,
             responses={200: {"model": BatchBody, "description": "every call ended within wait_s"}, **PROBLEMS},
             openapi_extra=documented(IDEMPOTENCY_KEY))
async def create_batch(request: Request, body: BatchRequest, caller: CallerDep) -> JSONResponse:
    """Run a model's tool calls, given in its own format; answer with the messages to append.

    Every call becomes a receipt (the model's call id, the batch's trace), all stored in one
    transaction and run in parallel. What the model got wrong (arguments that are not JSON, an
    unknown tool, a tool outside the API key's scope, arguments that fail the schema) is a failed
    receipt and a message telling it what to fix. 200 with ``messages`` once every call ended within
    ``wait_s``, else 202 (poll the batch).
    The same Idempotency-Key, or the same trace_id with the same call ids, returns the same batch.
    """
    services = services_of(request)
    batch, opened_calls, replayed = await accept_batch(services, caller, body, IDEMPOTENCY_KEY.read(request),
                                                   tracing.accepted_under(request.headers))
    if replayed:  # another key's batch under the same Idempotency-Key: shown only if this key could see it
        in_scope(caller, batch, opened_calls)
    if not batch.completed and body.wait_s:
        batch = await read_batch(services, caller, batch.id, body.wait_s)
    return batch_response(batch, replayed)


BATCH_ID = Param("batch_id", "path", str)


@router.get("/batches/{batch_id}", response_model=BatchBody, responses=PROBLEMS,
            openapi_extra=documented(BATCH_ID, WAIT_S))
async def get_batch(request: Request) -> JSONResponse:
    """A batch; with ``wait_s``, long-poll up to that many seconds for it to complete."""
    caller = await get_caller(request)  # its parameters are read here: see gateway.params
    batch_id, wait_s = BATCH_ID.read(request), WAIT_S.read(request)
    return batch_response(await read_batch(services_of(request), caller, batch_id, wait_s))
