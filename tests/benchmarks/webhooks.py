"""Webhook deliveries: toolrelay's dispatcher in the real worker against a bare aiohttp client.

Both post the same bodies to the same aiohttp receiver (a process of its own), which answers 200 at
once. The dispatcher side is the whole product path minus the receipts: messages are queued in the
outbox table for an endpoint registered over the HTTP API, one deliver task is published (as a
nudge would), and the figure runs until every message is ``delivered`` with its attempt logged.
The receiver checks the Standard Webhooks signature of every 25th request.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import aiohttp
import httpx
from celery import Celery
from sqlalchemy import func, insert, select

from receipts.db import Database, utcnow
from receipts.messages import DELIVER_TASK, WEBHOOKS_QUEUE
from receipts.settings import Settings
from receipts.tables import webhook_attempts, webhook_messages
from tests.benchmarks import load
from tests.benchmarks.deployment import Deployment, wait_until
from tests.support.stack import free_port
from workers.celery_app import celery_config

EVENT = "receipt.succeeded"


class Receiver:
    """The receiver process (``receiver.py``) on a free loopback port: 200 to every POST, counted."""

    def __init__(self, deployment: Deployment) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/hook"
        self.secret_file = deployment.log_dir / "receiver-secret"
        self.process = deployment.spawn("receiver", [sys.executable, "-m", "tests.benchmarks.receiver", str(port),
                                                     str(self.secret_file)])
        wait_until(self._up, "webhook receiver", self.process)

    def _up(self) -> bool:
        try:
            return httpx.get(self.url.replace("/hook", "/stats"), timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def use_secret(self, secret: str) -> None:
        self.secret_file.write_text(secret)

    def stats(self) -> dict[str, int]:
        return httpx.get(self.url.replace("/hook", "/stats"), timeout=10).json()  # type: ignore[no-any-return]


def sender(broker_url: str, key_prefix: str) -> Celery:
    """A Celery app that publishes to the deployment's broker and key prefix."""
    app = Celery("toolrelay-bench-webhooks", set_as_current=False)
    app.conf.update(celery_config(Settings(broker_url=broker_url, broker_key_prefix=key_prefix)))
    return app


class Deliveries:
    """Queue messages for one endpoint, let the worker's dispatcher deliver them, time it."""

    def __init__(self, db: Database, publisher: Celery, *, tenant_id: str, endpoint_id: str,
                 payload: dict[str, Any]) -> None:
        self.db = db
        self.publisher = publisher
        self.tenant_id = tenant_id
        self.endpoint_id = endpoint_id
        self.payload = payload
        self._batches = 0

    def _queue(self, count: int) -> None:
        self._batches += 1
        now = utcnow()
        rows = [{"id": f"msg_bench{self._batches}_{i}", "tenant_id": self.tenant_id, "endpoint_id": self.endpoint_id,
                 "url": None, "event_type": EVENT, "receipt_id": self.payload["data"]["id"], "payload": self.payload,
                 "status": "pending", "attempts": 0, "next_attempt_at": now, "locked_until": None,
                 "created_at": now, "updated_at": now} for i in range(count)]
        with self.db.transaction() as conn:
            conn.execute(insert(webhook_messages), rows)

    def _count(self, status: str) -> int:
        with self.db.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(webhook_messages)
                                    .where(webhook_messages.c.status == status)).scalar_one())

    def run(self, count: int, *, stall_s: float = 60) -> dict[str, Any]:
        """Queue ``count`` messages, publish one deliver task, wait until all are delivered."""
        before = self._count("delivered")
        with self.db.engine.connect() as conn:
            attempts_before = int(conn.execute(select(func.count()).select_from(webhook_attempts)).scalar_one())
        self._queue(count)
        started = time.time()
        self.publisher.send_task(DELIVER_TASK, queue=WEBHOOKS_QUEUE)
        last, changed = -1, time.monotonic()
        while (done := self._count("delivered") - before) < count:
            if done != last:
                last, changed = done, time.monotonic()
            elif time.monotonic() - changed > stall_s:
                raise RuntimeError(f"webhooks: {done} of {count} delivered; none for {stall_s:.0f} s "
                                   f"({self._count('failed')} failed)")
            time.sleep(0.05)
        with self.db.engine.connect() as conn:
            finished = conn.execute(select(func.max(webhook_messages.c.updated_at))
                                    .where(webhook_messages.c.status == "delivered")).scalar_one()
            attempts = int(conn.execute(select(func.count()).select_from(webhook_attempts)).scalar_one())
        return {"messages": count, "deliveries_per_s": round(count / (finished.timestamp() - started), 1),
                "attempts_logged": attempts - attempts_before}


async def _bare(url: str, body: bytes, count: int, concurrency: int) -> float:
    counter = iter(range(count))
    headers = {"content-type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def one_client() -> None:
            for _ in counter:
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"receiver answered {response.status}")

        started = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(concurrency)))
        return time.perf_counter() - started


def bare_aiohttp(url: str, payload: dict[str, Any], count: int, concurrency: int) -> dict[str, Any]:
    """The same bodies posted by a plain aiohttp client (no signing, no database) at ``concurrency``."""
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    seconds = load.run_async(_bare(url, body, count, concurrency))
    return {"posts": count, "concurrency": concurrency, "posts_per_s": round(count / seconds, 1)}
