"""A method a path does not support is a 405 problem whose ``Allow`` names every method the path has
(RFC 9110), not only those of the first route that matched (found by fuzzing the API)."""

from __future__ import annotations

import pytest

from tests.unit.gateway.conftest import Gateway, assert_problem


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("OPTIONS", "/v1/integrations/email/setup", "DELETE, GET, PUT"),
    ("POST", "/v1/webhook-endpoints/whep_x", "DELETE, GET, PATCH"),
    ("POST", "/v1/models/assistant", "DELETE, GET, PUT"),
    ("PATCH", "/v1/tools/echo", "DELETE, GET, PUT"),
    ("DELETE", "/v1/tools", "GET, POST"),
    ("DELETE", "/v1/tool-calls", "POST"),
    ("PUT", "/v1/receipts/rcpt_x", "GET"),
    ("POST", "/healthz", "GET"),
    ("POST", "/console/index.html", "GET"),
])
def test_allow_names_every_method_of_the_path(gateway: Gateway, method: str, path: str, allow: str) -> None:
    response = gateway.client.request(method, path, headers=gateway.headers())
    assert_problem(response, 405)
    assert response.headers["allow"] == allow
