"""Bearer keys on ``/mcp``: every HTTP request is authenticated on its own, like any ``/v1`` request.

The caller of each request (its key's tenant and scopes; not those of the request that opened the
MCP session) is what its handler sees, and a key's rate limit counts each request as on ``/v1``.
The tenant is also handed to the MCP session manager as the request's principal, so a session can
only be used by the tenant that opened it: a request with another tenant's key on that session is
answered as if the session did not exist (``404``).
"""

from __future__ import annotations

from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.deps import caller_of
from receipts.records import Caller


class CallerUser(AuthenticatedUser):
    """The principal of an authenticated ``/mcp`` request: its caller."""

    def __init__(self, caller: Caller) -> None:
        # Only the client id identifies a session's owner; the key itself is not kept.
        super().__init__(AccessToken(token="", client_id=caller.tenant.id, scopes=[]))
        self.caller = caller


class BearerAuth:
    """ASGI wrapper: ``401`` problem+json (``WWW-Authenticate: Bearer``) without a valid key, else the app.

    The refusal (401, or 429 over the key's rate limit) is raised as the gateway's own
    :class:`~gateway.problems.Problem` (by :func:`gateway.deps.caller_of`), so it is rendered where
    every other error is.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope["user"] = CallerUser(await caller_of(Request(scope, receive)))
        await self.app(scope, receive, send)


def caller_from(request: Any) -> Caller | None:
    """Who sent the HTTP request an MCP message came in (None outside an authenticated request)."""
    user = request.scope.get("user") if isinstance(request, Request) else None
    return user.caller if isinstance(user, CallerUser) else None
