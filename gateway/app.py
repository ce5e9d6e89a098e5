"""``create_app(settings)``: the FastAPI application."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from celery import Celery
from fastapi import FastAPI
from fastapi.telemetry import TelemetryConfig
from fastapi_offline import FastAPIOffline
from prometheus_client import CollectorRegistry
from starlette.routing import BaseRoute, Route

from gateway import problems
from gateway.console import routes as console
from gateway.deps import allowed_caller
from gateway.limits import BodyLimit
from gateway.mcp import PATH as MCP_PATH
from gateway.mcp import McpEndpoint
from gateway.publisher import BatchPublisher, RedisPublisher, publisher_for
from gateway.routes import batches, health, integrations, receipts, runs, tools, webhooks
from gateway.services import Services
from gateway.waiters import PostgresListener
from receipts.db import Database
from receipts.messages import TaskSender, transport_options
from receipts.settings import Settings
from receipts.telemetry.calls import CallMetrics, CallObserver

# Connections for the statements the gateway awaits on its event loop. Few on purpose: a statement
# takes well under a millisecond, so three serve more requests per second than one process can
# parse, and every further connection committing at the same time costs PostgreSQL CPU in commit
# lock waits (measured on 2 cores: 3 connections gave 2-24 % more end-to-end throughput than 10, median 7 %).
ASYNC_POOL_SIZE = 3

log = logging.getLogger(__name__)

# FastAPI's own OpenTelemetry support makes the server span of each request, a child of the caller's
# ``traceparent``, once a tracer provider is installed (receipts.telemetry.tracing); with none, it
# passes requests straight through. Spans only: no per-operation spans (dependencies, serialization),
# and no OpenTelemetry metrics or logs (Prometheus and the log format are toolrelay's own).
TELEMETRY: TelemetryConfig = {"operation_spans": False, "metrics": False, "logs": False}


def make_sender(settings: Settings) -> Celery:
    """A Celery app used only to publish tasks by name (the gateway never imports workers)."""
    app = Celery("toolrelay-gateway", broker=settings.broker_url, set_as_current=False)
    app.conf.update(broker_transport_options=transport_options(settings), task_serializer="json")
    return app


def create_app(settings: Settings, *, db: Database | None = None, sender: TaskSender | None = None,
               metrics_registry: CollectorRegistry | None = None) -> FastAPI:
    """The HTTP API. ``db`` and ``sender`` may be shared with an in-process worker (embedded mode), and
    ``metrics_registry`` with its figures; a database handed in is observed by whoever made it."""
    if db is None:
        db = Database.from_settings(settings, pool_size=4, name="toolrelay-gateway")
        metrics_registry = metrics_registry or CollectorRegistry(auto_describe=False)
        db.subscribe(CallObserver(CallMetrics(metrics_registry)))  # calls it ends: cancels, clients' results
    publisher: RedisPublisher | BatchPublisher | None = None
    if sender is None:
        sender = make_sender(settings)
        publisher = publisher_for(settings, sender)
    services = Services(settings, db, sender, publisher, metrics_registry)
    mcp = McpEndpoint(services)
    listener: PostgresListener | None = None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        nonlocal listener
        await db.open_async(ASYNC_POOL_SIZE)
        listener = PostgresListener(db, services.waiters)
        listener.start()
        async with mcp.running():  # MCP sessions end before the database closes
            yield
        if listener is not None:
            await listener.aclose()
        await db.close_async()
        if services.buckets is not None:
            await services.buckets.aclose()
        if isinstance(publisher, RedisPublisher):
            await publisher.aclose()
        elif publisher is not None:
            publisher.close()

    app = FastAPIOffline(  # /docs with its script and CSS served from here, not from a CDN
        redoc_url=None,  # ReDoc's page fetches its logo from its vendor's CDN: /docs is the one API page
        title="toolrelay",
        version="0.1.0",
        description="Durable, verifiable execution of LLM tool calls: receipts, workers, signed webhooks.",
        lifespan=lifespan,
        telemetry=TELEMETRY,
    )
    app.state.services = services
    problems.install(app, check_key=allowed_caller)
    # The routers' routes go on the app's own router (their paths carry their prefix already):
    # FastAPI from 0.150 keeps an included router behind a wrapper that it resolves, and matches
    # twice, on every request, which cost the hot reads a tenth of their CPU. Same routes.
    # They go before the docs' routes, which FastAPI adds first, in the order of routes_in_turn.
    routes = [route for router in (receipts.router, batches.router, runs.router, tools.router, webhooks.router,
                                   integrations.router, health.router, console.router) for route in router.routes]
    routes.append(Route(mcp.path, mcp.app, include_in_schema=False))  # an ASGI app, any method
    app.router.routes[:0] = routes_in_turn(routes)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    return app


# The routes every tool call takes, as a (method, path) each: submitting and reading a call, a batch of a
# model's calls, a run, and MCP's one endpoint (any method).
CALL_PATH = (("POST", "/v1/tool-calls"), ("GET", "/v1/receipts/{receipt_id}"), ("POST", "/v1/batches"),
             ("GET", "/v1/batches/{batch_id}"), ("*", MCP_PATH), ("POST", "/v1/runs"),
             ("GET", "/v1/runs/{run_id}"))


def routes_in_turn(routes: list[BaseRoute]) -> list[BaseRoute]:
    """``routes`` in the order a request is matched against them: those of :data:`CALL_PATH` first, the
    rest as they come. Each route a request is not for costs it a try (a microsecond or two in
    FastAPI's matching): a batch's request tried eight receipt routes first, an MCP request sixty."""
    first = {key: n for n, key in enumerate(CALL_PATH)}

    def turn(route: BaseRoute) -> int:
        path = getattr(route, "path", "")
        return min(first.get((method, path), len(first)) for method in getattr(route, "methods", None) or ("*",))

    return sorted(routes, key=turn)  # stable: the others keep their order
