"""ASGI entry point for ``toolrelay gateway`` (and any ASGI server): settings from the environment."""

from __future__ import annotations

from fastapi import FastAPI

from gateway.app import create_app
from receipts.settings import load_settings
from toolrelay import logs


def app_factory() -> FastAPI:
    logs.configure()
    return create_app(load_settings())
