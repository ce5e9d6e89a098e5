"""Checking a webhook URL before it is stored: http(s) only, and the SSRF guard on what it resolves to.

The dispatcher checks again at every delivery (DNS answers change); this check gives a clear 422 at
registration instead of a silent failure later.
"""

from __future__ import annotations

from gateway.problems import Problem
from gateway.services import Services
from receipts.records import Tenant

MAX_URL = 2048


def check_url(services: Services, url: str, *, field: str = "url") -> str:
    """``url`` if it may receive webhooks; raises OutboundRefused (a 422 with the field) otherwise. Blocks on DNS."""
    if len(url) > MAX_URL:
        raise Problem.invalid(field, f"at most {MAX_URL} characters")
    services.outbound_guard.check(url, field=field)
    return url


def check_call_webhook_url(services: Services, tenant: Tenant, url: str) -> None:
    """A call's own ``webhook_url``: a valid URL, and a default secret to sign its deliveries with."""
    check_url(services, url, field="webhook_url")
    if not services.webhooks.has_default_secret(tenant.id):
        raise Problem.invalid("webhook_url", "create the tenant's default webhook secret first "
                                             "(POST /v1/webhook-secret): it signs deliveries to webhook_url")
