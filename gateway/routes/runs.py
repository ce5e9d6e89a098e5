"""Models and runs: the agent loop as a durable service."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from agents.batches import complete
from gateway.bodies import JSONBodyRoute
from gateway.deps import TenantDep, services_of
from gateway.problems import Problem
from gateway.responses import JSONResponse
from gateway.runs import accept_run
from gateway.schemas import PROBLEMS, ModelRequest, RunRequest
from gateway.services import Services
from gateway.waiters import wait_until
from gateway.webhook_urls import check_url
from receipts import states
from receipts.catalogue import models
from receipts.catalogue.models import Models
from receipts.records import Run, RunStep, Tenant
from receipts.store import calls, runs

router = APIRouter(prefix="/v1", tags=["runs"], route_class=JSONBodyRoute)
Limit = Annotated[int, Query(ge=1, le=200)]


# -- models -------------------------------------------------------------------------------------

@router.put("/models/{name}", responses=PROBLEMS)
async def put_model(name: str, body: ModelRequest, request: Request, tenant: TenantDep) -> JSONResponse:
    """Define or replace a model runs may call: any OpenAI-compatible Chat Completions endpoint.

    ``api_key`` is stored encrypted and never shown; left out, the stored one is kept (null clears it).
    ``base_url`` passes the same SSRF guard as api_call tools.
    """
    services = services_of(request)
    if len(name) > 64 or not name.strip():
        raise Problem.invalid("name", "1 to 64 characters")
    await run_in_threadpool(check_url, services, body.base_url, field="base_url")
    model = await services.db.arun(Models(services.box).put(
        tenant.id, name, base_url=body.base_url, model=body.model, params=body.params, api_key=body.api_key,
        keep_key="api_key" not in body.model_fields_set))
    return JSONResponse(model.to_api())


@router.get("/models", responses=PROBLEMS)
async def list_models(request: Request, tenant: TenantDep) -> JSONResponse:
    """The tenant's models (never their keys)."""
    services = services_of(request)
    found = await services.db.arun(models.list_models(tenant.id))
    return JSONResponse({"data": [model.to_api() for model in found], "next_cursor": None})


@router.get("/models/{name}", responses=PROBLEMS)
async def get_model(name: str, request: Request, tenant: TenantDep) -> JSONResponse:
    """One model: where it is, which one, its params, whether a key is set."""
    services = services_of(request)
    return JSONResponse((await services.db.arun(models.get(tenant.id, name))).to_api())


@router.delete("/models/{name}", status_code=204, responses=PROBLEMS)
async def delete_model(name: str, request: Request, tenant: TenantDep) -> Response:
    services = services_of(request)
    await services.db.arun(models.delete(tenant.id, name))
    return Response(status_code=204)


# -- runs ---------------------------------------------------------------------------------------

async def read_run(services: Services, tenant: Tenant, run_id: str, wait_s: float) -> tuple[Run, list[RunStep]]:
    """The run once it ended or waits for a person, or as it stands after ``wait_s``."""

    async def read() -> tuple[Run, list[RunStep]]:
        return await services.db.arun(runs.get(tenant.id, run_id))

    return await wait_until(services.waiters, run_id, read,
                            lambda found: found[0].terminal or found[0].status == states.WAITING,
                            min(wait_s, services.settings.long_poll_max_s))


def run_response(run: Run, steps: list[RunStep], replayed: bool = False) -> JSONResponse:
    headers = {"Location": f"/v1/runs/{run.id}"}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return JSONResponse(run.to_api(steps), status_code=200 if run.terminal else 202, headers=headers)


@router.post("/runs", status_code=202, responses=PROBLEMS)
async def create_run(body: RunRequest, request: Request, tenant: TenantDep,
                     idempotency_key: Annotated[str | None, Header()] = None) -> JSONResponse:
    """Run the agent loop: the model proposes tool calls, toolrelay runs them, until the model answers.

    Only ``tools`` are offered and only they run; at most ``max_iterations`` model calls; the same call
    three times in a row ends it (``loop_detected``); ``timeout_s`` is its deadline. Every step is
    stored before the next, so a worker that dies mid-run never runs a tool call twice. 202 with the
    run (200 if it ended within ``wait_s``); GET /v1/runs/{id}?wait_s= long-polls.
    """
    services = services_of(request)
    run, replayed = await accept_run(services, tenant, body, idempotency_key)
    if replayed:
        run, steps = await services.db.arun(runs.get(tenant.id, run.id))
        return run_response(run, steps, replayed=True)
    run, steps = await read_run(services, tenant, run.id, body.wait_s)
    return run_response(run, steps)


@router.get("/runs/{run_id}", responses=PROBLEMS)
async def get_run(run_id: str, request: Request, tenant: TenantDep,
                  wait_s: Annotated[float, Query(ge=0, le=60)] = 0) -> JSONResponse:
    """A run with its steps; with ``wait_s``, long-poll until it ends (or waits for a person's approval)."""
    services = services_of(request)
    run, steps = await read_run(services, tenant, run_id, wait_s)
    return JSONResponse(run.to_api(steps))


@router.get("/runs", responses=PROBLEMS)
async def list_runs(request: Request, tenant: TenantDep, trace_id: str | None = None,
                    status: str | None = None, limit: Limit = 50, cursor: str | None = None) -> JSONResponse:
    """Runs newest first (without their steps), by trace or status; page with ``cursor``."""
    services = services_of(request)
    statuses = ("pending", "running", "waiting", "success", "failed", "canceled")
    if status is not None and status not in statuses:
        raise Problem.invalid("status", f"one of {', '.join(statuses)}")
    page = await services.db.arun(runs.list_runs(tenant.id, trace_id=trace_id, status=status, limit=limit,
                                                 cursor=cursor))
    return JSONResponse({"data": [run.to_api() for run in page.items], "next_cursor": page.next_cursor})


@router.post("/runs/{run_id}/cancel", responses=PROBLEMS)
async def cancel_run(run_id: str, request: Request, tenant: TenantDep) -> JSONResponse:
    """Cancel a run that has not ended, and the tool calls it still has open (409 once it ended)."""
    services = services_of(request)
    run = await services.db.arun(runs.cancel(tenant.id, run_id))
    if run.waiting_batch_id is not None:
        await services.db.arun(calls.cancel_batch(tenant.id, run.waiting_batch_id, reason="the run was canceled",
                                                  actor=f"run:{run.id}"))
        await services.db.arun(complete(run.waiting_batch_id))
    run, steps = await services.db.arun(runs.get(tenant.id, run_id))
    return JSONResponse(run.to_api(steps))
