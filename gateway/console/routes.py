"""Serve the console's static files under ``/console``.

The console is plain HTML, CSS and JavaScript modules in ``static/``, with no build step. These routes
need no API key: they hand out files only, and every piece of data the pages show comes from the
``/v1`` API, called by the browser with the key the user typed (kept in the tab's session storage).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from starlette.responses import FileResponse, RedirectResponse, Response

from gateway.problems import problem_response

STATIC = Path(__file__).parent / "static"

MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",  # what module scripts need, whatever the host's mime.types says
    ".svg": "image/svg+xml",
}

# The pages load nothing but their own files and talk to nothing but this origin.
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # revalidate, so a gateway upgrade is picked up at the next load
}

router = APIRouter(include_in_schema=False)


def static_file(relative: str) -> Path | None:
    """The file under ``STATIC`` that ``relative`` names, or None (unknown type, missing, or outside it)."""
    path = (STATIC / relative).resolve()
    if path.suffix not in MEDIA_TYPES or not path.is_file() or not path.is_relative_to(STATIC.resolve()):
        return None
    return path


@router.get("/console")
async def console_root() -> Response:
    """To ``/console/``: the page loads its modules by relative URL, which must resolve under it."""
    return RedirectResponse("/console/", status_code=308)


@router.get("/console/{relative:path}")
async def console_file(relative: str) -> Response:
    """A file of the console; the empty path is the single page, ``index.html``."""
    path = static_file(relative or "index.html")
    if path is None:
        return problem_response(404, f"no console file {relative!r}")
    return FileResponse(path, media_type=MEDIA_TYPES[path.suffix], headers=HEADERS)
