"""The cheapest FastAPI app that answers like toolrelay's gateway: the yardstick for one gateway process.

``GET /v1/receipts/{id}`` answers a fixed terminal receipt and ``POST /v1/tool-calls`` parses the JSON
body and answers 202 with a fixed pending receipt. Both bodies are the bytes the benchmark read from
toolrelay's gateway just before (same fields, same size), answered as they are: no database, no
auth, no serialization, no validation beyond parsing the body. Run it the way ``toolrelay gateway`` runs uvicorn, with
the loop and HTTP parser pinned::

    TOOLRELAY_BENCH_BODIES=bodies.json uvicorn tests.benchmarks.bare_fastapi:app \\
        --loop uvloop --http httptools --log-level warning --port PORT
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fastapi import Body, FastAPI, Response


def create_app(bodies: dict[str, str]) -> FastAPI:
    """The app, answering ``bodies["terminal"]`` to reads and ``bodies["accepted"]`` to submits."""
    terminal, accepted = bodies["terminal"].encode(), bodies["accepted"].encode()
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    @app.get("/v1/receipts/{receipt_id}")
    async def get_receipt(receipt_id: str) -> Response:
        return Response(terminal, media_type="application/json")

    @app.post("/v1/tool-calls")
    async def submit(body: dict[str, Any] = Body(...)) -> Response:  # noqa: B008 - FastAPI's idiom
        return Response(accepted, status_code=202, media_type="application/json")

    return app


app = create_app(json.loads(Path(os.environ["TOOLRELAY_BENCH_BODIES"]).read_text())) \
    if "TOOLRELAY_BENCH_BODIES" in os.environ else None
