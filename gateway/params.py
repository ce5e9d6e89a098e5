"""The parameters of the requests every call makes, taken by the route from its request.

FastAPI validates a route's declared path, query and header parameters on every request with
machinery that works each parameter's type out again each time; with the caller as a dependency,
that was near a third of the gateway's own CPU for a receipt read. The reads a client repeats for
every call (a receipt, a batch, each long-polled) take the request alone: the caller is checked
first (:func:`gateway.deps.get_caller`, as the dependency did), then each :class:`Param` is read
and validated by the same pydantic constraint, and a bad one is the same 422 (a
``RequestValidationError`` at the parameter's location). Submitting a call or a batch reads its
``Idempotency-Key`` the same way (its body and caller stay FastAPI's: the key is checked before
the body is refused). The OpenAPI entries come from :func:`documented`, written as FastAPI writes
a declared parameter (``tests/unit/gateway/test_params.py`` holds them to FastAPI's own).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from fastapi.exceptions import RequestValidationError
from pydantic import Field, TypeAdapter, ValidationError
from starlette.requests import Request

REQUIRED: Any = ...


@dataclass(frozen=True)
class Param:
    """One parameter: its name (a header's as sent), where it is, its type with its constraints, its default."""

    name: str
    where: Literal["path", "query", "header"]
    annotation: Any
    default: Any = REQUIRED
    adapter: TypeAdapter[Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "adapter", TypeAdapter(self.annotation))

    def read(self, request: Request) -> Any:
        """The parameter's value in ``request`` (its default if absent), validated; 422 if it is not valid."""
        if self.where == "path":
            raw = request.path_params.get(self.name)
        elif self.where == "header":
            raw = request.headers.get(self.name)
        else:
            raw = request.query_params.get(self.name) if request.scope.get("query_string") else None
        if raw is None:
            if self.default is REQUIRED:
                raise RequestValidationError([{"type": "missing", "loc": (self.where, self.name),
                                               "msg": "Field required", "input": None}])
            return self.default
        try:
            return self.adapter.validate_python(raw)
        except ValidationError as exc:
            raise RequestValidationError([{**error, "loc": (self.where, self.name, *error["loc"])}
                                          for error in exc.errors(include_url=False)]) from None

    def openapi(self) -> dict[str, Any]:
        """The OpenAPI parameter object FastAPI writes for this parameter declared on a route."""
        schema = self.adapter.json_schema()
        schema = {key: schema[key] for key in sorted(schema, key=lambda key: key != "type")}  # FastAPI's order
        if self.default is not REQUIRED and self.default is not None:
            schema["default"] = self.default
        schema["title"] = self.name.replace("_", " ").title()
        return {"name": self.name, "in": self.where, "required": self.default is REQUIRED, "schema": schema}


WAIT_S = Param("wait_s", "query", Annotated[float, Field(ge=0, le=60)], 0)  # a long poll's, up to 60 s
IDEMPOTENCY_KEY = Param("idempotency-key", "header", str | None, None)


def documented(*params: Param) -> dict[str, Any]:
    """A route's ``openapi_extra`` declaring ``params``, in order."""
    return {"parameters": [param.openapi() for param in params]}
