"""The order a request is matched against the routes: the ones every tool call takes first."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.routing import Match

from gateway.app import CALL_PATH, create_app
from receipts.settings import Settings


def app_routes() -> list[Any]:
    app = create_app(Settings(database_url="postgresql://toolrelay@127.0.0.1/unused",
                              broker_url="redis://127.0.0.1:6379/0"))
    return list(app.router.routes)


def key(route: Any) -> tuple[str, str]:
    methods = getattr(route, "methods", None)
    return ("*" if not methods else "GET" if "GET" in methods else min(methods)), route.path


def test_the_routes_every_call_takes_are_tried_first_and_no_route_is_lost() -> None:
    routes = app_routes()
    assert [key(route) for route in routes[:len(CALL_PATH)]] == list(CALL_PATH)
    keys = [key(route) for route in routes]
    assert len(keys) == len(set(keys))  # each route once
    assert {"/v1/receipts", "/v1/tools", "/v1/webhook-endpoints", "/healthz", "/openapi.json", "/docs"} <= {
        route.path for route in routes}


@pytest.mark.parametrize(("method", "path", "route"), [
    ("GET", "/v1/receipts/rcpt_1/events", "/v1/receipts/{receipt_id}/events"),
    ("GET", "/v1/receipts", "/v1/receipts"),
    ("GET", "/v1/receipts/rcpt_1", "/v1/receipts/{receipt_id}"),
    ("POST", "/v1/runs/run_1/cancel", "/v1/runs/{run_id}/cancel"),
    ("GET", "/v1/runs", "/v1/runs"),
    ("GET", "/v1/batches/batch_1", "/v1/batches/{batch_id}"),
    ("POST", "/mcp", "/mcp"),
])
def test_a_request_reaches_the_one_route_for_it(method: str, path: str, route: str) -> None:
    scope = {"type": "http", "method": method, "path": path, "root_path": "", "path_params": {}}
    assert [r.path for r in app_routes() if r.matches(dict(scope))[0] == Match.FULL] == [route]
