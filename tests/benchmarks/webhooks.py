"""Webhook deliveries: toolrelay's dispatcher in the real worker against a bare aiohttp client.

Both post the same bodies to the same aiohttp receiver (a process of its own), which answers 200 at
once. The dispatcher side is the whole product path minus the receipts: messages are queued in the
outbox table for an endpoint registered over the HTTP API, one deliver task is published (as a
nudge would), and the figure runs until every message is ``delivered`` with its attempt logged.
The receiver checks the Standard Webhooks signature of every 25th request. With one destination on
each side, the dispatcher may send ``--concurrency`` requests to its one endpoint, as the bare client
does (``TOOLRELAY_WEBHOOK_CONCURRENCY`` and ``TOOLRELAY_WEBHOOK_ENDPOINT_CONCURRENCY``; by default one
endpoint gets a quarter of a dispatcher's requests in flight, so a hanging one cannot hold them all).
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

from receipts.messages import DELIVER_TASK, WEBHOOKS_QUEUE
from receipts.settings import Settings
from tests.benchmarks import load, rows
from tests.benchmarks.deployment import Deployment, wait_until
from tests.benchmarks.run import Run
from tests.support import services
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

    def __init__(self, database_url: str, publisher: Celery, *, tenant_id: str, endpoint_id: str,
                 payload: dict[str, Any]) -> None:
        self.database_url = database_url
        self.publisher = publisher
        self.tenant_id = tenant_id
        self.endpoint_id = endpoint_id
        self.payload = payload
        self._batches = 0

    def run(self, count: int, *, stall_s: float = 60) -> dict[str, Any]:
        """Queue ``count`` messages, publish one deliver task, wait until all are delivered."""
        url = self.database_url
        before, attempts_before = rows.webhook_messages(url, "delivered"), rows.webhook_attempts(url)
        self._batches += 1
        rows.queue_webhook_messages(url, f"bench{self._batches}", count, tenant_id=self.tenant_id,
                                    endpoint_id=self.endpoint_id, event_type=EVENT,
                                    receipt_id=self.payload["data"]["id"], payload=self.payload)
        started = time.time()
        self.publisher.send_task(DELIVER_TASK, queue=WEBHOOKS_QUEUE)
        last, changed = -1, time.monotonic()
        while (done := rows.webhook_messages(url, "delivered") - before) < count:
            if done != last:
                last, changed = done, time.monotonic()
            elif time.monotonic() - changed > stall_s:
                raise RuntimeError(f"webhooks: {done} of {count} delivered; none for {stall_s:.0f} s "
                                   f"({rows.webhook_messages(url, 'failed')} failed)")
            time.sleep(0.05)
        finished = rows.last_delivered_at(url)
        return {"messages": count, "deliveries_per_s": round(count / (finished - started), 1),
                "attempts_logged": rows.webhook_attempts(url) - attempts_before}


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


def webhooks_section(run: Run) -> dict[str, Any]:
    """The dispatcher (in ``toolrelay worker``) delivering queued messages, against bare aiohttp posts."""
    args = run.args
    count = args.webhooks
    with run.deployment("webhooks") as deployment:
        with run.phase("webhooks: start gateway + worker + receiver"):
            receiver = Receiver(deployment)
            _, base_url = deployment.start_gateway()
            concurrency = str(args.concurrency)  # one endpoint, like the bare client's one destination
            deployment.start_worker(args.workers, {"TOOLRELAY_WEBHOOK_CONCURRENCY": concurrency,
                                                   "TOOLRELAY_WEBHOOK_ENDPOINT_CONCURRENCY": concurrency})
            with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {deployment.api_key}"},
                              timeout=30) as client:
                created = client.post("/v1/webhook-endpoints", json={"url": receiver.url, "event_types": [EVENT]})
                if created.status_code != 201:
                    raise RuntimeError(f"could not register the endpoint: {created.status_code} {created.text}")
                endpoint = created.json()
                receiver.use_secret(endpoint["secret"])
                receipt = client.post("/v1/tool-calls", json={"tool": "echo", "arguments": {"hook": 1},
                                                              "wait_s": 10}).json()
            payload = {"type": EVENT, "timestamp": receipt["finished_at"], "data": receipt}
            deliveries = Deliveries(deployment.database_url, sender(services.REDIS_URL, deployment.prefix),
                                    tenant_id=rows.endpoint_tenant(deployment.database_url, endpoint["id"]),
                                    endpoint_id=endpoint["id"], payload=payload)
            deadline = time.monotonic() + 30
            while receiver.stats()["requests"] < 1:  # the call's own receipt.succeeded, through the nudge
                if time.monotonic() > deadline:
                    raise RuntimeError("the echo call's webhook never arrived")
                time.sleep(0.05)
            deliveries.run(min(count, 200))  # warm-up
        result: dict[str, Any] = {}
        with run.phase(f"webhooks: {count} deliveries by the dispatcher"):
            result["dispatcher"] = deliveries.run(count)
        with run.phase(f"webhooks: {count} posts by bare aiohttp"):
            result["bare_aiohttp"] = bare_aiohttp(receiver.url, payload, count, args.concurrency)
        result["ratio"] = round(result["dispatcher"]["deliveries_per_s"] / result["bare_aiohttp"]["posts_per_s"], 3)
        stats = receiver.stats()
        result["signatures"] = {"verified": stats["verified"], "bad": stats["bad_signatures"]}
    return result
