"""Built-in integration providers, one module each: email, wikipedia, weather, mcp, http."""

from __future__ import annotations

from workers.integrations.base import Call, Method, Provider


def builtin_providers() -> dict[str, Provider]:
    """Every built-in provider by name (imported here, not at package import)."""
    from workers.integrations import email, http, mcp, weather, wikipedia

    return {module.PROVIDER.name: module.PROVIDER for module in (email, wikipedia, weather, mcp, http)}


__all__ = ["Call", "Method", "Provider", "builtin_providers"]
