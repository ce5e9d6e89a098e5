"""Publishing execute messages off the request path, many per broker round trip.

The 202 promises only that the receipt row is committed; its broker message is a hint the sweeper
re-sends if it never arrives. So the gateway need not hold the request for the broker: accepted
receipts go on an in-process queue, and one thread publishes whatever has accumulated in a single
kombu publish batch (one Redis pipeline for the lot). At low load a batch is one message sent at
once; under load the batch grows while the previous one is on the wire. A crash loses only hints.
"""

from __future__ import annotations

import logging
import queue
import threading

from celery import Celery
from kombu.utils.uuid import uuid

from receipts.messages import EXECUTE_TASK, execute_call
from receipts.records import Receipt

log = logging.getLogger(__name__)

MAX_BATCH = 500
_STOP = object()


class BatchPublisher:
    """A thread that publishes queued receipts' execute messages in batches."""

    def __init__(self, app: Celery, *, grace_s: float) -> None:
        self.app = app
        self.grace_s = grace_s
        self._queue: queue.SimpleQueue[Receipt | object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="publisher", daemon=True)
        self._started = False
        self._lock = threading.Lock()

    def __call__(self, receipt: Receipt) -> None:
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
            batch: list[Receipt] = []
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

    def _publish(self, batch: list[Receipt]) -> None:
        # The message send_task would build, without its per-call option merging, routing and
        # repr of the arguments (a third of the gateway's publishing time).
        amqp = self.app.amqp
        try:
            with self.app.producer_or_acquire() as producer, producer.batch(max_size=MAX_BATCH * 2):
                for receipt in batch:
                    args, options = execute_call(receipt, grace_s=self.grace_s)
                    queue = options.pop("queue")
                    task_id = uuid()
                    message = amqp.as_task_v2(task_id, EXECUTE_TASK, args, {}, root_id=task_id, ignore_result=True,
                                              argsrepr=repr(args), kwargsrepr="{}", **options)
                    amqp.send_task_message(producer, EXECUTE_TASK, message, queue=queue)
        except Exception as exc:  # noqa: BLE001 - the rows are committed; the sweeper re-sends their messages
            log.warning("could not publish %d accepted receipts (%s); the sweeper will send them", len(batch), exc)
