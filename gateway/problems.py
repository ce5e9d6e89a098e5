"""RFC 9457 problem details: every error the API returns is ``application/problem+json``.

Domain errors are turned into responses here and nowhere else.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from gateway.responses import JSONResponse
from receipts.errors import Conflict, IdempotencyMismatch, InvalidInput, NotConfigured, NotFound, Unavailable
from receipts.secretbox import SecretKeyMissing, SecretUnreadable

log = logging.getLogger(__name__)

MEDIA_TYPE = "application/problem+json"
TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class Problem(Exception):
    """Raise from a route to answer with a problem document."""

    def __init__(self, status: int, detail: str, *, type_: str = "about:blank",
                 errors: list[dict[str, str]] | None = None, headers: dict[str, str] | None = None,
                 **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.type = type_
        self.errors = errors
        self.headers = headers
        self.extra = extra

    @classmethod
    def invalid(cls, field: str, message: str, detail: str | None = None) -> Problem:
        """A 422 naming the one field at fault."""
        return cls(422, detail or f"invalid {field}", errors=[{"field": field, "message": message}])


def problem_response(status: int, detail: str, *, type_: str = "about:blank",
                     errors: list[dict[str, str]] | None = None, headers: dict[str, str] | None = None,
                     **extra: Any) -> JSONResponse:
    body: dict[str, Any] = {"type": type_, "title": TITLES.get(status, "Error"), "status": status, "detail": detail}
    if errors is not None:
        body["errors"] = errors
    body.update(extra)
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def validation_errors(exc: RequestValidationError) -> tuple[int, str, list[dict[str, str]]]:
    """Pydantic's errors as ``[{field, message}]``; malformed JSON is a 400, anything else a 422."""
    errors = []
    for item in exc.errors():
        if item.get("type") == "json_invalid":
            return 400, "the request body is not valid JSON", [{"field": "body", "message": str(item.get("msg"))}]
        loc = [str(part) for part in item.get("loc", ()) if part != "body"]
        errors.append({"field": ".".join(loc) or "body", "message": str(item.get("msg"))})
    return 422, "the request is not valid", errors


class AllowedMethods:
    """The methods a path supports, for the ``Allow`` header of a 405 (RFC 9110: every method of the
    resource). Starlette names only those of the first route whose path matched, and the API puts
    each method of a path in a route of its own; the OpenAPI document has them all, by path."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self._paths: list[tuple[re.Pattern[str], frozenset[str]]] | None = None

    def _table(self) -> list[tuple[re.Pattern[str], frozenset[str]]]:
        if self._paths is None:  # built at the first 405, once every route is in
            self._paths = [(compile_path(path)[0], frozenset(method.upper() for method in operations))
                           for path, operations in self.app.openapi().get("paths", {}).items()]
        return self._paths

    def header(self, path: str, given: str) -> str:
        """``Allow`` for ``path``: its documented methods and those Starlette named (``given``)."""
        methods = {method.strip() for method in given.split(",") if method.strip()}
        for pattern, documented in self._table():
            if pattern.match(path):
                methods |= documented
        return ", ".join(sorted(methods))


KEYED = "/v1/"  # every route under it needs a key


def install(app: FastAPI, check_key: Callable[[Request], Awaitable[object]] | None = None) -> None:
    """Register the exception handlers that turn every error into problem+json.

    ``check_key`` raises the :class:`Problem` (401, 403, 429) a request's key earns: FastAPI reads
    and parses a route's body before the route's dependencies check the key, so a ``/v1`` request
    whose body cannot be read is asked for its key first, and told that rather than of its body.
    """

    async def unread(request: Request, status: int, detail: str, errors: list[dict[str, str]] | None = None,
                     headers: dict[str, str] | None = None) -> JSONResponse:
        if check_key is not None and request.url.path.startswith(KEYED):
            try:
                await check_key(request)
            except Problem as refusal:
                return await _problem(request, refusal)
            except Unavailable:
                pass  # the key cannot be checked now: what is wrong with the body is still true
        return problem_response(status, detail, errors=errors, headers=headers)

    @app.exception_handler(Problem)
    async def _problem(_: Request, exc: Problem) -> JSONResponse:
        return problem_response(exc.status, exc.detail, type_=exc.type, errors=exc.errors, headers=exc.headers,
                                **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, detail, errors = validation_errors(exc)
        if status == 400:  # the body is no JSON: read before the key was checked
            return await unread(request, status, detail, errors)
        return problem_response(status, detail, errors=errors)

    allowed = AllowedMethods(app)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": allowed.header(request.url.path, (headers or {}).get("Allow", ""))}
        if exc.status_code == 400:  # FastAPI could not parse the body (an integer of over 4300 digits, ...)
            return await unread(request, 400, str(exc.detail), headers=headers)
        return problem_response(exc.status_code, str(exc.detail), headers=headers)

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return problem_response(404, exc.message)

    @app.exception_handler(IdempotencyMismatch)
    async def _mismatch(_: Request, exc: IdempotencyMismatch) -> JSONResponse:
        return problem_response(422, exc.message, type_="/problems/idempotency-key-reused",
                                errors=[{"field": "idempotency_key", "message": exc.message}])

    @app.exception_handler(Conflict)
    async def _conflict(_: Request, exc: Conflict) -> JSONResponse:
        return problem_response(409, exc.message)

    @app.exception_handler(InvalidInput)
    async def _invalid_input(_: Request, exc: InvalidInput) -> JSONResponse:
        return problem_response(422, exc.message, errors=exc.errors)

    @app.exception_handler(Unavailable)
    async def _unavailable(_: Request, exc: Unavailable) -> JSONResponse:
        return problem_response(503, "the database is unavailable; nothing was changed, try again shortly",
                                headers={"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(NotConfigured)
    async def _not_configured(_: Request, exc: NotConfigured) -> JSONResponse:
        return problem_response(503, exc.message)

    @app.exception_handler(SecretKeyMissing)
    async def _no_secret_key(_: Request, exc: SecretKeyMissing) -> JSONResponse:
        return problem_response(503, "TOOLRELAY_SECRET_KEY is not set: secrets (webhook signing secrets, "
                                     "integration setups, credential headers, secret arguments of a call) "
                                     "cannot be stored or read")

    @app.exception_handler(SecretUnreadable)
    async def _unreadable(_: Request, exc: SecretUnreadable) -> JSONResponse:
        return problem_response(409, "a stored secret cannot be decrypted (was TOOLRELAY_SECRET_KEY changed?); "
                                     "store it again")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem_response(500, "internal error; the request may not have been applied")
