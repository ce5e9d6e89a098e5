"""Errors of the webhooks package.

::

    WebhooksError
    └── AddressRefused   the receiver's host resolves to an address the SSRF guard refuses
                         (also an OSError, so the HTTP client reports it as a connection failure)

Every subclass uses its docstring as the default message.
"""

from __future__ import annotations


class WebhooksError(Exception):
    """Webhooks error."""

    def __init__(self, message: str | None = None) -> None:
        self.message = message or (self.__doc__ or "").strip()
        super().__init__(self.message)


class AddressRefused(WebhooksError, OSError):
    """The receiver resolves to a loopback, private, link-local or metadata address that is not allow-listed."""
