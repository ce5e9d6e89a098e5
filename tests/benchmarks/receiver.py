"""A webhook receiver for the benchmark, in a process of its own so it never shares a GIL with a sender.

``python -m tests.benchmarks.receiver PORT SECRET_FILE`` answers every ``POST /hook`` with 200 at once,
checks the Standard Webhooks signature of every 25th signed request with the secret in SECRET_FILE
(once that file exists), and reports its counts at ``GET /stats``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from aiohttp import web
from standardwebhooks.webhooks import Webhook

VERIFY_EVERY = 25


def make_app(secret_file: Path) -> web.Application:
    counts = {"requests": 0, "verified": 0, "bad_signatures": 0}

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        counts["requests"] += 1
        if "webhook-signature" in request.headers and counts["requests"] % VERIFY_EVERY == 0 and secret_file.exists():
            try:
                Webhook(secret_file.read_text().strip()).verify(body, dict(request.headers))
                counts["verified"] += 1
            except Exception:  # noqa: BLE001 - any failure to verify is counted
                counts["bad_signatures"] += 1
        return web.Response(status=200)

    async def stats(_: web.Request) -> web.Response:
        return web.json_response(counts)

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_get("/stats", stats)
    return app


def main() -> None:
    port, secret_file = int(sys.argv[1]), Path(sys.argv[2])
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvicorn[standard] brings it
        pass
    web.run_app(make_app(secret_file), host="127.0.0.1", port=port, access_log=None, print=None, backlog=1024)


if __name__ == "__main__":
    main()
