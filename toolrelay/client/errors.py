"""Errors of the Python SDK.

::

    ToolrelayError                 .status (the HTTP status, or None) and .problem (the problem+json, or {})
    ├── Retryable                  trying again later may succeed (.retry_after: seconds, or None)
    │   ├── ConnectionFailed       no answer: refused, reset, timed out (raised from the httpx.TransportError)
    │   ├── RateLimited            429: over the key's rate limit
    │   └── Unavailable            503: the database or the broker is down, or a feature is not configured
    ├── Unauthorized               401: missing, unknown, revoked or expired API key
    ├── Forbidden                  403: the key may not do this (read-only, limited to other tools)
    ├── NotFound                   404: no such receipt, tool, batch or run for this key's tenant
    ├── Conflict                   409: the request contradicts the current state (cancel a finished call)
    ├── InvalidRequest             422: validation failed, nothing was stored (.errors: [{field, message}])
    ├── UnexpectedResponse         an answer that is not what the API sends (not JSON, a field missing)
    ├── WaitTimeout                wait() or wait_run() ran out of time first (.receipt or .run as last seen)
    └── WebhookVerificationFailed  a webhook whose signature, timestamp or body does not verify

Any other error status raises ``ToolrelayError`` itself, with its ``.status``. Every class uses its
docstring as the default message; an error answered by the API says its status, title and detail.
``ConnectionFailed`` after a submit may mean the call was accepted all the same: resubmitting is safe
with an ``idempotency_key`` (the same receipt comes back), and only then.

httpx's errors are mapped where they enter, in :func:`transport_errors`::

    httpx.TransportError  -> ConnectionFailed    (connect, read, write, pool, timeouts, protocol)
    other httpx.RequestError -> UnexpectedResponse (decoding, too many redirects)
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from toolrelay.client.records import Receipt, Run


class ToolrelayError(Exception):
    """toolrelay answered with an error."""

    def __init__(self, message: str | None = None, *, status: int | None = None,
                 problem: Mapping[str, Any] | None = None) -> None:
        self.status = status
        self.problem: dict[str, Any] = dict(problem or {})
        super().__init__(message or (type(self).__doc__ or "").strip())


class Retryable(ToolrelayError):
    """toolrelay cannot answer right now; trying again later may succeed."""

    def __init__(self, message: str | None = None, *, status: int | None = None,
                 problem: Mapping[str, Any] | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, status=status, problem=problem)
        self.retry_after = retry_after


class ConnectionFailed(Retryable):
    """The request got no answer from toolrelay."""


class RateLimited(Retryable):
    """Over the API key's rate limit."""


class Unavailable(Retryable):
    """toolrelay is unavailable."""


class Unauthorized(ToolrelayError):
    """The API key is missing, unknown, revoked or expired."""


class Forbidden(ToolrelayError):
    """The API key may not do this."""


class NotFound(ToolrelayError):
    """No such resource for this API key's tenant."""


class Conflict(ToolrelayError):
    """The request conflicts with the current state."""


class InvalidRequest(ToolrelayError):
    """The request is not valid; nothing was stored."""

    @property
    def errors(self) -> list[dict[str, str]]:
        """The field errors of the problem: ``[{"field": "arguments.seconds", "message": ...}]``."""
        errors = self.problem.get("errors")
        return list(errors) if isinstance(errors, list) else []


class UnexpectedResponse(ToolrelayError):
    """toolrelay's answer is not what the API sends."""


class WaitTimeout(ToolrelayError):
    """The receipt or run did not settle in time."""

    def __init__(self, message: str | None = None, *, receipt: Receipt | None = None, run: Run | None = None) -> None:
        super().__init__(message)
        self.receipt = receipt  # as last seen, from wait(); None from wait_run()
        self.run = run  # as last seen, from wait_run(); None from wait()


class WebhookVerificationFailed(ToolrelayError):
    """The webhook does not verify."""


BY_STATUS: dict[int, type[ToolrelayError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: InvalidRequest,
    429: RateLimited,
    503: Unavailable,
}


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header in seconds from now: delay-seconds or an HTTP date (None if absent or bad)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def describe(status: int, problem: Mapping[str, Any]) -> str:
    """``422 Unprocessable Content: arguments do not match ... (arguments.seconds: 'long' is not ...)``."""
    text = f"{status} {problem.get('title') or 'Error'}"
    if problem.get("detail"):
        text += f": {problem['detail']}"
    errors = problem.get("errors")
    if isinstance(errors, list) and errors:
        fields = "; ".join(f"{e.get('field')}: {e.get('message')}" for e in errors if isinstance(e, Mapping))
        text += f" ({fields})"
    return text


def from_response(response: httpx.Response) -> ToolrelayError:
    """The error an unsuccessful answer stands for, with its parsed problem document."""
    try:
        body = response.json()
    except ValueError:
        body = None
    problem: dict[str, Any] = body if isinstance(body, dict) else {}
    message = describe(response.status_code, problem or {"title": response.reason_phrase})
    cls = BY_STATUS.get(response.status_code, ToolrelayError)
    if issubclass(cls, Retryable):
        return cls(message, status=response.status_code, problem=problem,
                   retry_after=retry_after(response.headers.get("retry-after")))
    return cls(message, status=response.status_code, problem=problem)


@contextmanager
def transport_errors(method: str, path: str) -> Iterator[None]:
    """Map httpx's request errors to this package's, ``from`` the original (see the module's table)."""
    try:
        yield
    except httpx.TransportError as exc:
        raise ConnectionFailed(_failure(method, path, exc)) from exc
    except httpx.RequestError as exc:
        raise UnexpectedResponse(_failure(method, path, exc)) from exc


def _failure(method: str, path: str, exc: httpx.RequestError) -> str:
    """``GET http://host:port/v1/receipts/rcpt_1: [Errno 111] Connection refused``."""
    try:
        where = str(exc.request.url)
    except RuntimeError:  # an error raised before httpx attached its request
        where = path
    return f"{method} {where}: {str(exc) or type(exc).__name__}"
