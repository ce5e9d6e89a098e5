"""The SDK stands alone: importing it loads none of the server's packages."""

from __future__ import annotations

import subprocess
import sys

import toolrelay

SERVER = ("receipts", "workers", "webhooks", "gateway", "sqlalchemy", "celery", "psycopg", "fastapi")


def test_importing_the_sdk_loads_no_server_package() -> None:
    probe = ("import sys, toolrelay.client; "
             f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(SERVER)!r}))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_the_tool_authors_names_still_import_from_toolrelay() -> None:
    assert set(toolrelay.__all__) == set(toolrelay.EXPORTS)
    from toolrelay import ToolContext, tool

    assert callable(tool) and ToolContext.__name__ == "ToolContext"
    for name in toolrelay.__all__:
        assert getattr(toolrelay, name) is not None
