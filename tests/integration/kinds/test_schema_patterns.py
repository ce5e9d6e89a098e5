"""A tool's schema patterns on the real deployment: one that would backtrack for ever under Python's
``re`` costs the gateway nothing, and one RE2 cannot run is refused when the tool is defined."""

from __future__ import annotations

import pytest

from tests.integration.kinds.conftest import define
from tests.support.stack import Stack


@pytest.mark.timeout(60)
def test_a_backtracking_pattern_does_not_stall_the_gateway(stack: Stack) -> None:
    with stack.client() as client:
        define(client, {"kind": "function", "name": "greedy_pattern", "description": "x", "parameters": {
            "type": "object", "properties": {"word": {"type": "string", "pattern": "^(a+)+$"}}, "required": ["word"]}})
        word = "a" * 5000 + "!"  # under re, 2^5000 ways to fail
        refused = client.post("/v1/tool-calls", json={"tool": "greedy_pattern", "arguments": {"word": word}})
        assert refused.status_code == 422, refused.text
        assert [e["field"] for e in refused.json()["errors"]] == ["arguments.word"]
        assert client.get("/healthz").status_code == 200
        accepted = client.post("/v1/tool-calls", json={"tool": "greedy_pattern", "arguments": {"word": "aaa"}})
        assert accepted.status_code == 202 and accepted.json()["status"] == "waiting"


def test_a_pattern_re2_cannot_run_is_refused_at_definition(stack: Stack) -> None:
    with stack.client() as client:
        refused = client.post("/v1/tools", json={"kind": "function", "name": "lookahead_pattern", "description": "x",
                                                 "parameters": {"type": "object", "properties": {
                                                     "password": {"type": "string", "pattern": "^(?=.*\\d).{8,}$"}}}})
        assert refused.status_code == 422
        assert refused.headers["content-type"].startswith("application/problem+json")
        [error] = refused.json()["errors"]
        assert error["field"] == "parameters.properties.password.pattern"
        assert "lookaround" in error["message"] and "RE2" in error["message"]
        assert client.get("/v1/tools/lookahead_pattern").status_code == 404
