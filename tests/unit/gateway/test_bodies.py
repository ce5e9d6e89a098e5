"""Request bodies are read by the store's codec: json's values (no integer rounded, no refusal orjson
alone would make), on every route that takes a body."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.routing import APIRoute

from gateway import bodies
from gateway.bodies import JSONBodyRoute
from tests.unit.gateway.conftest import Gateway, assert_problem

BIG = 123456789012345678901234567890  # orjson alone reads it as a float


def test_every_route_that_takes_a_body_reads_it_by_the_codec(gateway: Gateway) -> None:
    routes = [route for route in gateway.client.app.routes if isinstance(route, APIRoute)]  # type: ignore[attr-defined]
    with_body = [route for route in routes if route.body_field is not None]
    assert len(with_body) >= 10
    assert [route.path for route in with_body if not isinstance(route, JSONBodyRoute)] == []


def test_the_codec_reads_a_body_and_a_get_is_left_alone(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[Any] = []
    codec = bodies.jsoncodec.loads
    monkeypatch.setattr(bodies.jsoncodec, "loads", lambda data: read.append(data) or codec(data))
    posted = gateway.post_call({"tool": "echo", "arguments": {"n": 1}})
    assert posted.status_code == 202 and read == [b'{"tool":"echo","arguments":{"n":1}}']
    assert gateway.client.get(f"/v1/receipts/{posted.json()['id']}", headers=gateway.headers()).status_code == 200
    assert len(read) == 1


def test_a_body_reads_back_as_json_reads_it(gateway: Gateway) -> None:
    body = (b'{"tool": "echo", "arguments": {"big": %d, "neg": -%d, "s": "\\ud83d\\ude00", '
            b'"edge": 9223372036854775807}}' % (BIG, BIG))
    answer = gateway.client.post("/v1/tool-calls", content=body,
                                 headers={**gateway.headers(), "Content-Type": "application/json"})
    assert answer.status_code == 202, answer.text
    assert answer.json()["input"] == {"big": BIG, "neg": -BIG, "s": "\U0001F600", "edge": 2**63 - 1}


def test_what_json_refuses_is_a_400_and_what_it_reads_but_cannot_be_stored_a_422(gateway: Gateway) -> None:
    headers = {**gateway.headers(), "Content-Type": "application/json"}
    refused = gateway.client.post("/v1/tool-calls", content=b'{"tool": "echo", "arguments": {"a": 1,}}',
                                  headers=headers)
    assert assert_problem(refused, 400)["errors"][0]["field"] == "body"
    unstorable = gateway.client.post("/v1/tool-calls", content=b'{"tool": "echo", "arguments": {"a": NaN}}',
                                     headers=headers)
    assert_problem(unstorable, 422)
    assert gateway.receipt_count() == 0
