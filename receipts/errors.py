"""Errors of the receipts layer.

::

    ReceiptsError
    ├── NotFound                 the thing does not exist for this tenant
    ├── Conflict                 the request contradicts the current state
    │   ├── IdempotencyMismatch  same Idempotency-Key, different request
    │   └── InvalidTransition    e.g. cancel a terminal receipt, post a result twice
    ├── InvalidInput             a value the store refuses (bad tool name, bad URL...)
    ├── Unavailable              the database cannot be reached now (retryable: a 503)
    └── NotConfigured            a setting the operation needs is missing (TOOLRELAY_DATABASE_URL...)

Every subclass uses its docstring as the default message.
"""

from __future__ import annotations


class ReceiptsError(Exception):
    """Receipts error."""

    def __init__(self, message: str | None = None, **details: object) -> None:
        self.message = message or (self.__doc__ or "").strip()
        self.details = details
        super().__init__(self.message)


class NotFound(ReceiptsError):
    """Not found."""


class Conflict(ReceiptsError):
    """The request conflicts with the current state."""


class IdempotencyMismatch(Conflict):
    """This Idempotency-Key was already used with a different request."""


class InvalidTransition(Conflict):
    """The receipt is not in a state that allows this."""


class InvalidInput(ReceiptsError):
    """Invalid input."""

    def __init__(self, message: str | None = None, errors: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


class Unavailable(ReceiptsError):
    """The database is unavailable; try again shortly."""

    retry_after_s = 2


class NotConfigured(ReceiptsError):
    """toolrelay is not configured for this."""
