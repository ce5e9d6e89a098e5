"""The console's files: what the router serves, what it refuses, and that every module import resolves."""

from __future__ import annotations

import re

from fastapi import FastAPI
from fastapi.testclient import TestClient

from gateway.console import routes
from gateway.console.routes import STATIC, static_file

IMPORT = re.compile(r"""^import .* from "(\.{1,2}/[^"]+)";$""", re.MULTILINE)


def console_client() -> TestClient:
    app = FastAPI()
    app.include_router(routes.router)
    return TestClient(app)


def test_static_file_finds_the_console_files_and_nothing_outside() -> None:
    assert static_file("index.html") == (STATIC / "index.html").resolve()
    assert static_file("js/pages/receipt.js") == (STATIC / "js" / "pages" / "receipt.js").resolve()
    for refused in ("../routes.py", "../../app.py", "js/../../__init__.py", "missing.js", "js", "/etc/passwd",
                    "../../../README.md"):
        assert static_file(refused) is None, refused


def test_the_page_and_its_modules_are_served_without_a_key_with_their_types() -> None:
    client = console_client()
    page = client.get("/console/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src" not in page.headers["content-security-policy"]  # default-src 'self' covers scripts
    assert "default-src 'self'" in page.headers["content-security-policy"]
    module = client.get("/console/js/app.js")
    assert module.status_code == 200 and module.headers["content-type"].startswith("text/javascript")
    assert client.get("/console/console.css").headers["content-type"].startswith("text/css")
    redirect = client.get("/console", follow_redirects=False)
    assert redirect.status_code == 308 and redirect.headers["location"] == "/console/"
    missing = client.get("/console/nothing.js")
    assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"


def test_every_module_import_names_a_file_that_exists() -> None:
    # No build step checks the pages: a typo in an import would only show as a blank page.
    modules = sorted(STATIC.rglob("*.js"))
    assert len(modules) >= 10
    for module in modules:
        for target in IMPORT.findall(module.read_text()):
            assert (module.parent / target).resolve().is_file(), f"{module.relative_to(STATIC)} imports {target}"
    assert 'src="js/app.js"' in (STATIC / "index.html").read_text()
