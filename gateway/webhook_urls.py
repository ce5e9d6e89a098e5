"""Checking a webhook URL before it is stored: http(s) only, and the SSRF guard on what it resolves to.

The dispatcher checks again at every delivery (DNS answers change); this check gives a clear 422 at
registration instead of a silent failure later.
"""

from __future__ import annotations

from gateway.problems import Problem
from gateway.services import Services

MAX_URL = 2048


def check_url(services: Services, url: str, *, field: str = "url") -> str:
    """``url`` if it may receive webhooks; raises OutboundRefused (a 422 with the field) otherwise. Blocks on DNS."""
    if len(url) > MAX_URL:
        raise Problem.invalid(field, f"at most {MAX_URL} characters")
    services.outbound_guard.check(url, field=field)
    return url
