"""The hot reads' parameters, read by the route, are documented and refused exactly as FastAPI would."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from fastapi import FastAPI, Header, Query, Request
from fastapi.testclient import TestClient

from gateway import problems
from gateway.params import IDEMPOTENCY_KEY, WAIT_S, Param, documented
from gateway.responses import JSONResponse

THING_ID = Param("thing_id", "path", str)


def reference_app() -> FastAPI:
    """The same route twice: its parameters declared to FastAPI, and read with :class:`Param`."""
    app = FastAPI()
    problems.install(app)

    @app.get("/declared/{thing_id}")
    async def declared(thing_id: str, wait_s: Annotated[float, Query(ge=0, le=60)] = 0,
                       idempotency_key: Annotated[str | None, Header()] = None) -> JSONResponse:
        return JSONResponse({"thing_id": thing_id, "wait_s": wait_s, "key": idempotency_key})

    @app.get("/read/{thing_id}", openapi_extra=documented(THING_ID, WAIT_S, IDEMPOTENCY_KEY))
    async def read(request: Request) -> JSONResponse:
        return JSONResponse({"thing_id": THING_ID.read(request), "wait_s": WAIT_S.read(request),
                             "key": IDEMPOTENCY_KEY.read(request)})

    return app


def test_the_openapi_parameters_are_fastapis() -> None:
    paths = reference_app().openapi()["paths"]
    assert paths["/read/{thing_id}"]["get"]["parameters"] == paths["/declared/{thing_id}"]["get"]["parameters"]


@pytest.mark.parametrize("query", [{}, {"wait_s": "0"}, {"wait_s": "2.5"}, {"wait_s": "60"}, {"wait_s": "61"},
                                   {"wait_s": "-1"}, {"wait_s": "soon"}, {"wait_s": "nan"}, {"wait_s": ""},
                                   {"other": "1"}])
def test_values_and_refusals_are_fastapis(query: dict[str, Any]) -> None:
    client = TestClient(reference_app())
    declared = client.get("/declared/t_1", params=query)
    read = client.get("/read/t_1", params=query)
    assert (read.status_code, read.headers["content-type"], read.json()) == \
           (declared.status_code, declared.headers["content-type"], declared.json())


@pytest.mark.parametrize("headers", [{}, {"Idempotency-Key": "k1"}, {"idempotency-key": ""}])
def test_the_idempotency_key_is_read_as_fastapi_reads_it(headers: dict[str, str]) -> None:
    client = TestClient(reference_app())
    assert client.get("/read/t_1", headers=headers).json() == client.get("/declared/t_1", headers=headers).json()


def test_a_refusal_names_the_parameter() -> None:
    response = TestClient(reference_app()).get("/read/t_1", params={"wait_s": "61"})
    assert response.status_code == 422
    assert response.json()["errors"] == [{"field": "query.wait_s",
                                          "message": "Input should be less than or equal to 60"}]
