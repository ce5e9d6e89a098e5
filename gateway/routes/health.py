"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.responses import PlainTextResponse, Response

from gateway.deps import services_of
from gateway.problems import problem_response
from gateway.responses import JSONResponse

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> JSONResponse:
    """The process is up."""
    return JSONResponse({"status": "ok"})


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> Response:
    """Prometheus metrics: counters of this process (of every process of the gateway, summed, with --workers)
    and backlog gauges from the database."""
    services = services_of(request)
    body = await run_in_threadpool(generate_latest, services.metrics.scraped)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """The database answers and the broker accepts a connection; 503 otherwise."""
    services = services_of(request)
    checks: dict[str, str] = {}
    try:
        await services.db.aping()
        checks["database"] = "ok"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        checks["database"] = f"error: {type(exc).__name__}"
    try:
        await run_in_threadpool(services.broker_ping)
        checks["broker"] = "ok"
    except Exception as exc:  # noqa: BLE001
        checks["broker"] = f"error: {type(exc).__name__}"
    if all(value == "ok" for value in checks.values()):
        return JSONResponse({"status": "ok", "checks": checks})
    return problem_response(503, "not ready", checks=checks)
