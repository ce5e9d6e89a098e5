"""Errors a tool raises to say how it failed. The executor maps them to the receipt's ``error``.

::

    ToolFailure                  base: the tool ran and failed
    ├── ToolError                permanent: retrying cannot help (error.code "tool_error")
    │   ├── InvalidArguments     the arguments were wrong (error.code "invalid_arguments")
    │   ├── Forbidden            refused by policy, e.g. the SSRF guard (error.code "forbidden")
    │   └── ToolNotFound         what the call names does not exist for its tenant (error.code "not_found")
    ├── RetryableError           transient: retried if the tool is read or idempotent
    │   └── UpstreamError        a remote service failed (error.code "upstream_error")
    ├── ToolTimeout              the attempt ran out of time (error.code "timeout")
    └── NoThreadFree             the tool was not started: every thread for sync tools is held
                                 (error.code "internal")

Any other exception a tool raises counts as a transient ``tool_error``.
"""

from __future__ import annotations

from typing import Any


class ToolFailure(Exception):
    """The tool failed."""

    code = "tool_error"
    retryable = False

    def __init__(self, message: str | None = None, *, retry_after_ms: int | None = None,
                 details: dict[str, Any] | None = None, retryable: bool | None = None) -> None:
        self.message = message or (self.__doc__ or "").strip()
        self.retry_after_ms = retry_after_ms
        self.details = details or {}
        if retryable is not None:
            self.retryable = retryable
        super().__init__(self.message)


class ToolError(ToolFailure):
    """The tool failed permanently."""


class InvalidArguments(ToolError):
    """The arguments are not valid for this tool."""

    code = "invalid_arguments"


class Forbidden(ToolError):
    """The request is refused by policy."""

    code = "forbidden"


class ToolNotFound(ToolError):
    """What the call names does not exist (for this tenant)."""

    code = "not_found"


class PartialSuccess(ToolError):
    """The tool did part of its work.

    Raise it with the ``output`` of what was done; the receipt ends ``partially_succeeded`` with that
    output and this error. It is never retried: a repeat would redo the part that is done.
    """

    def __init__(self, message: str | None = None, *, output: Any = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message, details=details)
        self.output = output


class RetryableError(ToolFailure):
    """The tool failed for a reason that may pass."""

    retryable = True


class UpstreamError(RetryableError):
    """A remote service the tool depends on failed."""

    code = "upstream_error"


class ToolTimeout(ToolFailure):
    """The attempt ran out of time."""

    code = "timeout"
    retryable = True


class NoThreadFree(ToolFailure):
    """Every thread for sync tools is held (by sync tools that overran their timeout); the tool was not started."""

    code = "internal"
    retryable = True
