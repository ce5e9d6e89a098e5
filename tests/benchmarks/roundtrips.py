"""Counting proxies for PostgreSQL and Redis: how many round trips (and which statements) one call costs.

Each proxy sits between one toolrelay process and the real server on 127.0.0.1 and only counts:

* a *round trip* is a turn of the conversation: the client sends after the server last answered;
* PostgreSQL: every ``Query`` or ``Sync`` message ends one, labelled with its SQL (from ``Parse``, or
  from the prepared statement a ``Bind`` names); SSL is refused so the bytes stay readable;
* Redis: every command, by name.

Used on its own small sequential run: the proxy adds latency, so it never runs while timing. The
calls take the user's whole path (POST, then long-poll the receipt), so the reads count too.
"""

from __future__ import annotations

import asyncio
import re
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tests.benchmarks.load import Client
from tests.benchmarks.run import Run
from tests.support import services

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104


def _label(sql: str) -> str:
    """The first words of a statement, enough to tell statements apart."""
    sql = re.sub(r"\s+", " ", sql).strip()
    if sql.upper().startswith(("INSERT INTO", "UPDATE", "DELETE FROM")):
        return " ".join(sql.split(" ")[:3])[:60]
    if sql.upper().startswith("SELECT"):
        table = re.search(r"\bFROM (\w+)", sql, re.IGNORECASE)
        return f"SELECT ... FROM {table.group(1)}" if table else sql[:60]
    return sql[:60]


@dataclass
class Tally:
    """What one proxy saw since the last :meth:`reset`."""

    round_trips: int = 0
    labels: Counter[str] = field(default_factory=Counter)

    def reset(self) -> None:
        self.round_trips = 0
        self.labels.clear()


class _Conversation:
    """Turn-taking of one connection: a client send after a server answer starts a round trip."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self.client_turn = False

    def client_sent(self) -> None:
        if not self.client_turn:
            self.tally.round_trips += 1
            self.client_turn = True

    def server_sent(self) -> None:
        self.client_turn = False


class CountingProxy:
    """A TCP proxy on a free loopback port in a background thread; ``kind`` is "postgres" or "redis"."""

    def __init__(self, kind: str, upstream_port: int) -> None:
        self.kind = kind
        self.upstream_port = upstream_port
        self.tally = Tally()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"proxy-{kind}", daemon=True)
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> CountingProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        """Close the listener and every proxied connection, then end the thread."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        for _ in range(5):  # cancelling a connection's task leaves its two halves to cancel next round
            tasks = asyncio.all_tasks(self._loop)
            if not tasks:
                break
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self._loop.close()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:  # asyncio keeps only weak references: hold the task until it is done
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_w.close()
            return
        talk = _Conversation(self.tally)
        upstream = self._postgres_client if self.kind == "postgres" else self._redis_client
        try:
            await asyncio.gather(upstream(client_r, client_w, server_w, talk), self._pipe(server_r, client_w, talk))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # one side hung up, or the proxy is stopping
        finally:
            for writer in (client_w, server_w):
                writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, talk: _Conversation) -> None:
        while data := await reader.read(65536):
            talk.server_sent()
            writer.write(data)
            await writer.drain()
        writer.close()

    async def _postgres_client(self, reader: asyncio.StreamReader, client_w: asyncio.StreamWriter,
                               server_w: asyncio.StreamWriter, talk: _Conversation) -> None:
        while True:  # startup: refuse SSL / GSS encryption, forward the startup message itself
            head = await reader.readexactly(8)
            length, code = struct.unpack("!ii", head)
            rest = await reader.readexactly(length - 8)
            if code in (SSL_REQUEST, GSSENC_REQUEST):
                client_w.write(b"N")
                await client_w.drain()
                continue
            server_w.write(head + rest)
            break
        statements: dict[bytes, str] = {}
        pending = ""
        while True:
            head = await reader.readexactly(5)
            kind, length = head[:1], struct.unpack("!i", head[1:])[0]
            body = await reader.readexactly(length - 4)
            talk.client_sent()
            if kind == b"P":
                name, sql = body.split(b"\0", 2)[:2]
                statements[name] = pending = sql.decode(errors="replace")
            elif kind == b"B":
                pending = pending or statements.get(body.split(b"\0", 2)[1], "?")
            elif kind in (b"Q", b"S"):
                text = body.rstrip(b"\0").decode(errors="replace") if kind == b"Q" else pending
                self.tally.labels[_label(text) if text.strip() != ";" else "; (pool_pre_ping)"] += 1
                pending = ""
            server_w.write(head + body)
            await server_w.drain()

    async def _redis_client(self, reader: asyncio.StreamReader, client_w: asyncio.StreamWriter,
                            server_w: asyncio.StreamWriter, talk: _Conversation) -> None:
        while True:
            line = await reader.readline()
            if not line:
                return
            talk.client_sent()
            chunks = [line]
            if line.startswith(b"*"):
                words = []
                for _ in range(int(line[1:])):
                    size_line = await reader.readline()
                    data = await reader.readexactly(int(size_line[1:]) + 2)
                    chunks += [size_line, data]
                    words.append(data[:-2])
                self.tally.labels[words[0].decode(errors="replace").upper() if words else "?"] += 1
            server_w.write(b"".join(chunks))
            await server_w.drain()


def round_trips_section(run: Run) -> dict[str, Any]:
    """SQL statements and Redis commands per call, gateway and worker apart (a run of its own, untimed)."""
    calls = run.args.round_trips
    with run.deployment("round-trips") as deployment, \
            run.phase(f"round trips: {calls} calls through counting proxies"):
        postgres_port = urlsplit(deployment.database_url).port or 5432  # the benchmark's own server, or the tests'
        redis_port = urlsplit(services.REDIS_URL).port or 6379
        upstreams = (("postgres", postgres_port), ("redis", redis_port))
        proxies = {f"{role}_{kind}": CountingProxy(kind, port).start()
                   for role in ("gateway", "worker") for kind, port in upstreams}
        def stop_proxies() -> None:
            for proxy in proxies.values():
                proxy.stop()

        run.cleanups.append(stop_proxies)

        def env(role: str) -> dict[str, str]:
            return {"TOOLRELAY_DATABASE_URL": deployment.database_url.replace(
                        f"127.0.0.1:{postgres_port}", f"127.0.0.1:{proxies[role + '_postgres'].port}"),
                    "TOOLRELAY_BROKER_URL": services.REDIS_URL.replace(
                        f"127.0.0.1:{redis_port}", f"127.0.0.1:{proxies[role + '_redis'].port}")}

        _, base_url = deployment.start_gateway(env("gateway"))
        deployment.start_worker(run.args.workers, env("worker"))
        client = Client(base_url, deployment.api_key)
        client.whole_path(20, 1)  # warm-up: pools, caches, prepared statements
        started = time.monotonic()
        for proxy in proxies.values():
            proxy.tally.reset()
        done = client.whole_path(calls, 1)
        seconds = time.monotonic() - started
        result: dict[str, Any] = {"calls": calls, "seconds": round(seconds, 1),
                                  "gets_per_call": round(sum(c.gets for c in done) / max(calls, 1), 2)}
        for name, proxy in proxies.items():
            result[name] = {
                "round_trips_per_call": round(proxy.tally.round_trips / calls, 2),
                "per_call": {label: round(n / calls, 2) for label, n in proxy.tally.labels.most_common()},
            }
        deployment.stop_processes()
        stop_proxies()
    return result
