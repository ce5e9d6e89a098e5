"""A webhook receiver that flaps, and verifies every delivery with the ``standardwebhooks`` library.

It is a small HTTP/1.1 server on asyncio streams (keep-alive, ``Content-Length`` bodies), so that it
controls exactly how each request ends. In each mode a request is read whole, verified and recorded
first, then answered:

- ``ok``: 200;
- ``error``: 500;
- ``hang``: nothing until ``hang_s`` (past the dispatcher's timeout), then 200 to a sender long gone;
- ``reset``: the connection is reset (``SO_LINGER`` 0, then closed: a TCP RST, no answer);
- ``mixed``: one of the four above, picked at random per request.

Verification (``Webhook(secret).verify``) checks the signature over id, timestamp and body, and the
timestamp's freshness. What counts as delivered from the receiver's side is a verified request it
answered 200 to in time (``acked``); the dispatcher's side is in the database.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
from collections import Counter
from dataclasses import dataclass, field

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

MODES = ("ok", "error", "hang", "reset")


@dataclass
class Deliveries:
    """What the receiver saw, by webhook-id (a message keeps its id on every attempt)."""

    requests: int = 0
    unverified: int = 0
    answers: Counter[str] = field(default_factory=Counter)
    verified: set[str] = field(default_factory=set)  # ids of messages with at least one verified request
    acked: set[str] = field(default_factory=set)  # ids answered 200 in time
    events: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # id -> (type, receipt, status)
    unverified_samples: list[str] = field(default_factory=list)


class FlappingReceiver:
    """Serves ``http://127.0.0.1:<port>/hook``; :attr:`mode` can be changed at any time."""

    def __init__(self, port: int, *, hang_s: float, seed: int | None = None) -> None:
        self.port = port
        self.hang_s = hang_s
        self.secret: str | None = None  # set once the endpoint exists (its secret is known then)
        self.mode = "ok"
        self.fail_next = 0  # answer this many requests 500 first, whatever the mode
        self.seen = Deliveries()
        self._random = random.Random(seed)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, backlog=256)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._connections):
                writer.transport.abort()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                headers, body = request
                if not await self._answer(writer, headers, body):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            self._connections.discard(writer)
            if not writer.transport.is_closing():
                writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, headers: dict[str, str], body: bytes) -> bool:
        """Record and answer one request; False when the connection is done."""
        webhook_id = self._record(headers, body)
        mode = self.mode if self.mode != "mixed" else self._random.choice(MODES)
        if self.fail_next > 0:
            self.fail_next -= 1
            mode = "error"
        self.seen.answers[mode] += 1
        if mode == "reset":
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        if mode == "hang":
            await asyncio.sleep(self.hang_s)
        status = 500 if mode == "error" else 200
        reason = b"Internal Server Error" if status == 500 else b"OK"
        payload = b"no" if status == 500 else b"ok"
        writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
                     % (status, reason, len(payload), payload))
        await writer.drain()
        if status == 200 and mode == "ok" and webhook_id is not None:
            self.seen.acked.add(webhook_id)
        return True

    def _record(self, headers: dict[str, str], body: bytes) -> str | None:
        """Verify the request and record it; its webhook-id if it verified."""
        self.seen.requests += 1
        try:
            if self.secret is None:
                raise WebhookVerificationError("no secret yet")
            payload = Webhook(self.secret).verify(body, headers)
        except (WebhookVerificationError, ValueError, KeyError) as exc:
            self.seen.unverified += 1
            if len(self.seen.unverified_samples) < 5:
                self.seen.unverified_samples.append(f"{type(exc).__name__}: {exc}; headers {sorted(headers)}")
            return None
        webhook_id = headers["webhook-id"]
        self.seen.verified.add(webhook_id)
        data = payload.get("data", {}) if isinstance(payload, dict) else {}
        self.seen.events[webhook_id] = (str(payload.get("type")), str(data.get("id")), str(data.get("status")))
        return webhook_id


async def _read_request(reader: asyncio.StreamReader) -> tuple[dict[str, str], bytes] | None:
    """One request's headers (lower-case names) and body; None at the end of the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return None
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return headers, body


def summary(seen: Deliveries) -> dict[str, object]:
    """The receiver's figures, as JSON."""
    return {"requests": seen.requests, "unverified": seen.unverified, "verified_messages": len(seen.verified),
            "acked_messages": len(seen.acked), "answers": dict(seen.answers),
            "unverified_samples": seen.unverified_samples}

