"""Real HTTP servers on loopback for tests of api_call tools and integrations.

:class:`Upstream` is a threaded HTTP/1.1 server whose routes answer with :class:`Reply` objects
(or a list of them, one per request, the last repeating). It records every request it receives,
so a test can check what really arrived: path, query, headers, body. Special replies: :class:`Hang`
(answers nothing until the server stops), :class:`Flood` (streams a large body and counts what the
client actually read).

:func:`mediawiki` and :func:`open_meteo` imitate the JSON of the MediaWiki search API and of
Open-Meteo's forecast API, for the wikipedia and weather providers.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Reply:
    status: int = 200
    json: Any = None
    body: bytes | str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hang:
    """Never answer (until the server stops, or ``seconds`` pass)."""

    seconds: float = 120.0


@dataclass
class Flood:
    """Answer 200 with ``size`` bytes of text, streamed; ``sent`` counts what got through."""

    size: int
    chunk: int = 64 * 1024
    sent: int = 0
    broken: bool = False


@dataclass(frozen=True)
class Seen:
    """A request as the server received it."""

    method: str
    path: str
    raw_path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Answer = Reply | Hang | Flood | Callable[[Seen], Reply]


class Upstream:
    """A threaded HTTP server on 127.0.0.1 with programmable routes."""

    def __init__(self) -> None:
        self.routes: dict[str, list[Answer]] = {}
        self.seen: list[Seen] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"

    def route(self, path: str, *answers: Answer) -> Upstream:
        """Answer requests to ``path`` with ``answers`` in turn; the last one repeats."""
        self.routes[path] = list(answers)
        return self

    def url(self, path: str) -> str:
        return self.base + path

    def requests_to(self, path: str) -> list[Seen]:
        return [seen for seen in self.seen if seen.path == path]

    def _next(self, path: str) -> Answer:
        with self._lock:
            answers = self.routes.get(path)
            if not answers:
                return Reply(404, json={"error": "no route"})
            return answers.pop(0) if len(answers) > 1 else answers[0]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                seen = Seen(self.command, parts.path, self.path, parse_qs(parts.query, keep_blank_values=True),
                            {k.lower(): v for k, v in self.headers.items()}, body)
                with upstream._lock:
                    upstream.seen.append(seen)
                answer = upstream._next(parts.path)
                if isinstance(answer, Hang):
                    upstream.stopping.wait(answer.seconds)
                    self.close_connection = True
                    return
                if isinstance(answer, Flood):
                    self._flood(answer)
                    return
                reply = answer(seen) if callable(answer) else answer
                payload = reply.body if reply.body is not None else (
                    json.dumps(reply.json).encode() if reply.json is not None else b"")
                if isinstance(payload, str):
                    payload = payload.encode()
                self.send_response(reply.status)
                if reply.json is not None and reply.body is None:
                    self.send_header("Content-Type", "application/json")
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            def _flood(self, flood: Flood) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(flood.size))
                self.end_headers()
                block = b"x" * flood.chunk
                try:
                    while flood.sent < flood.size and not upstream.stopping.is_set():
                        piece = block[: min(flood.chunk, flood.size - flood.sent)]
                        self.wfile.write(piece)
                        flood.sent += len(piece)
                except OSError:
                    flood.broken = True
                self.close_connection = True

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve

        return Handler

    def start(self) -> Upstream:
        threading.Thread(target=self.server.serve_forever, name=f"upstream-{self.port}", daemon=True).start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def serving(upstream: Upstream | None = None) -> Iterator[Upstream]:
    running = (upstream or Upstream()).start()
    try:
        yield running
    finally:
        running.stop()


# -- imitations of public APIs -------------------------------------------------------------------

def mediawiki(seen: Seen) -> Reply:
    """``action=query&list=search`` as MediaWiki answers it (formatversion=2)."""
    q = {k: v[0] for k, v in seen.query.items()}
    if q.get("action") != "query" or q.get("list") != "search" or not q.get("srsearch"):
        return Reply(400, json={"error": {"code": "badparams", "info": "unsupported request"}})
    term = q["srsearch"]
    limit = int(q.get("srlimit", "10"))
    hits = [
        {"ns": 0, "title": f"{term} (topic {i})", "pageid": 1000 + i, "size": 5000, "wordcount": 800,
         "snippet": f'The <span class="searchmatch">{term}</span> article number {i}',
         "timestamp": "2024-01-01T00:00:00Z"}
        for i in range(1, 4)
    ][:limit]
    return Reply(json={"batchcomplete": True, "query": {"searchinfo": {"totalhits": 3}, "search": hits}})


def open_meteo(seen: Seen) -> Reply:
    """``/v1/forecast`` with ``current=`` or ``daily=`` variables, as Open-Meteo answers it."""
    q = {k: v[0] for k, v in seen.query.items()}
    try:
        lat, lon = float(q["latitude"]), float(q["longitude"])
    except (KeyError, ValueError):
        return Reply(400, json={"error": True, "reason": "Parameter 'latitude' and 'longitude' must be set"})
    unit = "°F" if q.get("temperature_unit") == "fahrenheit" else "°C"
    body: dict[str, Any] = {"latitude": lat, "longitude": lon, "timezone": "GMT", "elevation": 38.0}
    if "current" in q:
        names = q["current"].split(",")
        body["current_units"] = {"time": "iso8601", **{n: unit if "temperature" in n else "?" for n in names}}
        body["current"] = {"time": "2024-06-01T12:00", "interval": 900, **{n: 21.5 for n in names}}
    if "daily" in q:
        days = int(q.get("forecast_days", "7"))
        names = q["daily"].split(",")
        body["daily_units"] = {"time": "iso8601", **{n: unit if "temperature" in n else "mm" for n in names}}
        body["daily"] = {"time": [f"2024-06-{d + 1:02d}" for d in range(days)],
                         **{n: [10.0 + d for d in range(days)] for n in names}}
    return Reply(json=body)
