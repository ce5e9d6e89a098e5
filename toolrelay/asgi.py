"""ASGI entry point for ``toolrelay gateway`` (and any ASGI server): settings from the environment."""

from __future__ import annotations

from fastapi import FastAPI

from gateway.app import create_app
from receipts.settings import load_settings
from receipts.telemetry import tracing
from toolrelay import heap, logs


def app_factory() -> FastAPI:
    """The gateway of this process: logging and tracing set up as the environment says, then the app."""
    settings = load_settings()
    logs.configure(settings)
    tracing.configure("toolrelay-gateway")
    app = create_app(settings)
    heap.settle()
    return app
