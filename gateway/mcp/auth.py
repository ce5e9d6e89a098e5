"""Bearer keys on ``/mcp``: every HTTP request is authenticated on its own, like any ``/v1`` request.

The tenant of each request (not of the request that opened the MCP session) is what its handler
sees. The tenant is also handed to the MCP session manager as the request's principal, so a session
can only be used by the tenant that opened it: a request with another tenant's key on that session
is answered as if the session did not exist (``404``).
"""

from __future__ import annotations

from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.deps import get_tenant
from receipts.records import Tenant


class TenantUser(AuthenticatedUser):
    """The principal of an authenticated ``/mcp`` request: its tenant."""

    def __init__(self, tenant: Tenant) -> None:
        # Only the client id identifies a session's owner; the key itself is not kept.
        super().__init__(AccessToken(token="", client_id=tenant.id, scopes=[]))
        self.tenant = tenant


class BearerAuth:
    """ASGI wrapper: ``401`` problem+json (``WWW-Authenticate: Bearer``) without a valid key, else the app.

    The refusal is raised as the gateway's own :class:`~gateway.problems.Problem` (by
    :func:`gateway.deps.get_tenant`), so it is rendered where every other error is.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            tenant = await get_tenant(Request(scope, receive))
            scope["user"] = TenantUser(tenant)
        await self.app(scope, receive, send)


def tenant_of(request: Any) -> Tenant | None:
    """The tenant that sent the HTTP request an MCP message came in (None outside an authenticated request)."""
    user = request.scope.get("user") if isinstance(request, Request) else None
    return user.tenant if isinstance(user, TenantUser) else None
