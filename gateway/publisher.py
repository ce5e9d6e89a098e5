"""Publishing execute messages off the request path, many per broker round trip.

The 202 promises only that the receipt row is committed; its broker message is a hint the sweeper
re-sends if it never arrives. So the gateway need not hold the request for the broker: accepted
receipts are queued in the process and published in batches, whatever accumulated while the previous
batch was on the wire (at low load, one message at once). A crash loses only hints.

On Redis, :class:`RedisPublisher` does this on the event loop itself: it builds the message Celery's
``send_task`` would send and LPUSHes the lot in one pipeline with redis-py's asyncio client. A thread
that publishes through kombu instead (:class:`BatchPublisher`, for other brokers) costs the gateway
more than a millisecond per call on a busy loop, most of it the two threads taking turns at the GIL.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import queue
import random
import threading
from typing import Any

import orjson
import redis.asyncio as aioredis
from celery import Celery
from celery.utils.nodenames import anon_nodename

from receipts.messages import EXECUTE_TASK, Executable, execute_call
from receipts.settings import Settings

log = logging.getLogger(__name__)

MAX_BATCH = 500
_STOP = object()
_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))  # the version and variant bits
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)  # version 4, RFC 4122 variant


def uuid() -> str:
    """A random (version 4) UUID as kombu's ``uuid()`` makes a message's ids, at a quarter of its cost: from
    ``random`` (reseeded in every forked process) rather than the operating system's entropy, which
    these ids, unique but never secret, do not need."""
    value = "%032x" % (random.getrandbits(128) & _UUID4_CLEAR | _UUID4_SET)
    return f"{value[:8]}-{value[8:12]}-{value[12:16]}-{value[16:20]}-{value[20:]}"


class BatchPublisher:
    """A thread that publishes queued receipts' execute messages in batches."""

    def __init__(self, app: Celery, *, grace_s: float) -> None:
        self.app = app
        self.grace_s = grace_s
        self._queue: queue.SimpleQueue[Executable | object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="publisher", daemon=True)
        self._started = False
        self._lock = threading.Lock()

    def __call__(self, receipt: Executable) -> None:
        """Queue ``receipt``'s message (thread-safe)."""
        if not self._started:
            with self._lock:
                if not self._started:
                    self._thread.start()
                    self._started = True
        self._queue.put(receipt)

    def close(self, timeout: float = 10.0) -> None:
        """Publish what is queued, then stop."""
        if self._started:
            self._queue.put(_STOP)
            self._thread.join(timeout)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            batch: list[Executable] = []
            item = self._queue.get()
            while True:
                if item is _STOP:
                    stopping = True
                else:
                    batch.append(item)  # type: ignore[arg-type]
                if stopping or len(batch) >= MAX_BATCH:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._publish(batch)

    def _publish(self, batch: list[Executable]) -> None:
        try:
            with self.app.producer_or_acquire() as producer, producer.batch(max_size=MAX_BATCH * 2):
                for receipt in batch:
                    queue_name, message = task_message(self.app, receipt, self.grace_s)
                    self.app.amqp.send_task_message(producer, EXECUTE_TASK, message, queue=queue_name)
        except Exception as exc:  # noqa: BLE001 - the rows are committed; the sweeper re-sends their messages
            log.warning("could not publish %d accepted receipts (%s); the sweeper will send them", len(batch), exc)


ORIGIN = anon_nodename()  # what Celery names the sender of a message (it would work it out per message)


def task_message(app: Celery, receipt: Executable, grace_s: float) -> tuple[str, Any]:
    """The queue and the Celery task message ``send_task`` would build for ``receipt``'s execute task,
    without its per-call option merging, routing and repr of the arguments (a third of its cost)."""
    args, options = execute_call(receipt, grace_s=grace_s)
    queue_name = options.pop("queue")
    task_id = uuid()
    return queue_name, app.amqp.as_task_v2(task_id, EXECUTE_TASK, args, {}, root_id=task_id, ignore_result=True,
                                           argsrepr=repr(args), kwargsrepr="{}", origin=ORIGIN, **options)


class ExecuteMessages:
    """:func:`task_message` for many receipts at a fraction of its cost (it was a fifth of a batch's).

    Celery builds the first message (``as_task_v2``); each next one is a copy of it with what differs
    from one execute message to the next: the task id, the arguments and the hard time limit.
    """

    PER_MESSAGE_OPTIONS = frozenset({"time_limit"})  # what execute_call's options hold, less the queue

    def __init__(self, app: Celery, grace_s: float) -> None:
        self.app = app
        self.grace_s = grace_s
        self._first: tuple[dict[str, Any], dict[str, Any], Any] | None = None

    def __call__(self, receipt: Executable) -> tuple[str, Any]:
        args, options = execute_call(receipt, grace_s=self.grace_s)
        queue_name = options.pop("queue")
        if self._first is None or options.keys() != self.PER_MESSAGE_OPTIONS:
            queue_name, message = task_message(self.app, receipt, self.grace_s)
            if options.keys() == self.PER_MESSAGE_OPTIONS:
                headers, properties, body, _ = message
                self._first = headers, properties, body[2]
            return queue_name, message
        headers, properties, embed = self._first
        task_id = uuid()
        return queue_name, ({**headers, "id": task_id, "root_id": task_id, "argsrepr": repr(args),
                             "timelimit": [options["time_limit"], None]},
                            {**properties, "correlation_id": task_id}, (args, {}, embed), None)


REDIS_SCHEMES = ("redis://", "rediss://")


class RedisPublisher:
    """Publishes queued receipts' execute messages from the event loop, one Redis pipeline per batch.

    Call it on the loop (from a coroutine); :meth:`aclose` publishes what is queued and closes the client.
    """

    def __init__(self, app: Celery, *, grace_s: float) -> None:
        self.app = app
        self.grace_s = grace_s
        self.key_prefix = (app.conf.broker_transport_options or {}).get("global_keyprefix", "")
        self.messages = ExecuteMessages(app, grace_s)
        self._redis: aioredis.Redis | None = None
        self._pending: list[Executable] = []
        self._flushing: asyncio.Task[None] | None = None

    @staticmethod
    def supports(broker_url: str) -> bool:
        return broker_url.startswith(REDIS_SCHEMES)

    def __call__(self, receipt: Executable) -> None:
        """Queue ``receipt``'s message; a flush starts unless one is running (it will take this one too)."""
        self._pending.append(receipt)
        if self._flushing is None:
            self._flushing = asyncio.get_running_loop().create_task(self._flush())

    async def aclose(self) -> None:
        if self._flushing is not None:
            await self._flushing
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                try:
                    if self._redis is None:
                        self._redis = aioredis.Redis.from_url(self.app.conf.broker_url, socket_timeout=10,
                                                              socket_connect_timeout=5)
                    lists: dict[str, list[bytes]] = {}
                    for receipt in batch:  # one LPUSH per queue: its values are pushed in order
                        key, message = self.command(receipt)
                        lists.setdefault(key, []).append(message)
                    try:
                        await self._push(self._redis, lists)
                    except (aioredis.ConnectionError, aioredis.TimeoutError):
                        # A connection from before a Redis restart fails its first command, and
                        # redis-py's pipeline does not try again: once more, on a new connection
                        # (a message pushed twice is harmless: the second claim finds nothing).
                        await self._push(self._redis, lists)
                except Exception as exc:  # noqa: BLE001 - the rows are committed; the sweeper re-sends them
                    log.warning("could not publish %d accepted receipts (%s); the sweeper will send them",
                                len(batch), exc)
        finally:
            self._flushing = None

    @staticmethod
    async def _push(client: aioredis.Redis, lists: dict[str, list[bytes]]) -> None:
        async with client.pipeline(transaction=False) as pipe:
            for key, messages in lists.items():
                pipe.lpush(key, *messages)
            await pipe.execute()

    def command(self, receipt: Executable) -> tuple[str, bytes]:
        """The Redis list and the message ``send_task`` would push for ``receipt`` (kombu's envelope)."""
        queue_name, (headers, properties, body, _) = self.messages(receipt)
        message: dict[str, Any] = {  # kombu's json serializer, less its hooks for types these never hold
            "body": base64.b64encode(orjson.dumps(body)).decode(),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": headers,
            "properties": {**properties, "delivery_mode": 2,
                           "delivery_info": {"exchange": "", "routing_key": queue_name},
                           "priority": 0, "body_encoding": "base64",
                           # kombu's own is a fresh uuid; the message's id is one too, unique per message
                           "delivery_tag": properties["correlation_id"]},
        }
        return self.key_prefix + queue_name, orjson.dumps(message)


def publisher_for(settings: Settings, sender: Celery) -> RedisPublisher | BatchPublisher:
    """The publisher of a gateway on ``settings``' broker: from the event loop on Redis (unless
    ``TOOLRELAY_REDIS_FAST_PATH`` is off), else kombu's producer in a thread."""
    if settings.redis_fast_path and RedisPublisher.supports(settings.broker_url):
        return RedisPublisher(sender, grace_s=settings.lease_grace_s)
    return BatchPublisher(sender, grace_s=settings.lease_grace_s)
