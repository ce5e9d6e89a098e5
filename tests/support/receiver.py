"""A real webhook receiver on 127.0.0.1 that verifies every request with the ``standardwebhooks`` library.

Tests script its answers (status, headers, body, a delay to hang past a timeout), stop it to play a
receiver that is down, start it again on the same port, and read back every request it got with
which of the known secrets verified it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from tests.support.stack import free_port


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: str = "ok"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class Received:
    """One request as the receiver saw it."""

    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic() on arrival
    verified_by: tuple[int, ...]  # indices (into Receiver.secrets) of the secrets that verify it
    unix: float  # time.time() on arrival: the clock PostgreSQL's now() reads, on this machine

    @property
    def payload(self) -> Any:
        return json.loads(self.body)

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def signatures(self) -> list[str]:
        return self.headers["webhook-signature"].split(" ")

    @property
    def timestamp(self) -> int:
        """``webhook-timestamp``: the Unix second the attempt was signed in."""
        return int(self.headers["webhook-timestamp"])


class Receiver:
    """Scripted replies in order (then ``default``); every request recorded and verified."""

    def __init__(self, secrets: list[str] | None = None, port: int | None = None) -> None:
        self.port = port or free_port()
        self.secrets: list[str] = list(secrets or [])
        self.requests: list[Received] = []
        self.script: list[Reply] = []
        self.default = Reply()
        self._lock = threading.Condition()
        self._server: ThreadingHTTPServer | None = None
        self._stopping = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def respond(self, *replies: Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    def _next_reply(self) -> Reply:
        with self._lock:
            return self.script.pop(0) if self.script else self.default

    def _verify(self, body: bytes, headers: dict[str, str]) -> tuple[int, ...]:
        verified = []
        for index, secret in enumerate(list(self.secrets)):
            try:
                Webhook(secret).verify(body, headers)
            except WebhookVerificationError:
                continue
            verified.append(index)
        return tuple(verified)

    def _record(self, request: Received) -> None:
        with self._lock:
            self.requests.append(request)
            self._lock.notify_all()

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                reply = receiver._next_reply()
                receiver._record(Received(self.path, headers, body, at=time.monotonic(),
                                          verified_by=receiver._verify(body, headers), unix=time.time()))
                if reply.delay_s and receiver._stopping.wait(reply.delay_s):
                    return
                data = reply.body.encode()
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # the default 5 drops SYNs when many connections open at once

        self._stopping.clear()
        server = Server(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop listening (a receiver that is down refuses connections)."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def wait_for(self, count: int, timeout: float = 30.0, **match: Any) -> list[Received]:
        """Block until ``count`` requests (whose payload matches ``match``, e.g. type=...) arrived; return them."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                found = [r for r in self.requests if _matches(r, match)]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"expected {count} requests matching {match}, got {len(found)}: "
                                         f"{[r.payload.get('type') for r in self.requests]}")
                self._lock.wait(left)

    def of_type(self, event_type: str) -> Iterator[Received]:
        return (r for r in list(self.requests) if r.payload.get("type") == event_type)


def _matches(request: Received, match: dict[str, Any]) -> bool:
    payload = request.payload
    for key, value in match.items():
        if key == "receipt_id":
            if payload["data"]["id"] != value:
                return False
        elif payload.get(key) != value:
            return False
    return True
