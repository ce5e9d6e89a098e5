"""The hard-kill backstop: an attempt killed by the Celery hard time limit ends ``failed``/``timeout`` at once.

A sync tool that blocks its interruption (masks ``SIGALRM``, or sits in C code) outlives its
timeout; the execute task's hard time limit (the attempt timeout plus half the lease grace, see
:func:`receipts.messages.execute_call`) then has the worker's main process kill the pool process
that runs it. That process can record nothing any more, and left alone its receipt would stay
``running`` until the lease ran out and the sweeper settled it (a retry, or ``outcome_unknown``),
which is neither soon nor what happened: the attempt timed out.

So the main process records it. Celery calls ``Request.on_timeout`` there for a hard limit (the
documented hook for a custom request class), knowing which pool process ran the task. The attempt
that process claimed is in the timeline (the claim's actor is the process, see
:func:`workers.execution.worker_actor`), and the receipt is finished ``failed``/``timeout`` fenced by
that attempt, like any other finish: if the attempt already ended (the tool returned just in time)
or moved on, nothing is written. The write goes to a thread of its own, so the worker's event loop
does not wait on the database before killing the process. Such an attempt is not retried: a tool
that held its process past its timeout once would likely hold the next one too.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

from celery.worker.request import Request

from receipts import states
from receipts.db import Database
from receipts.messages import TaskSender
from receipts.records import Receipt
from receipts.store import calls
from receipts.store.calls import Result, error
from workers.execution import complete_batch, worker_actor

log = logging.getLogger(__name__)


def record_hard_timeout(db: Database, sender: TaskSender, receipt_id: str, pid: int,
                        limit_s: float) -> Receipt | None:
    """Fail the attempt of ``receipt_id`` that pool process ``pid`` ran with ``timeout``; None if fenced out.

    Returns None as well when ``pid`` never claimed the receipt (its message was a duplicate).
    """
    attempt = db.run(calls.attempt_claimed_by(receipt_id, worker_actor(pid)))
    if attempt is None:
        return None
    err = error("timeout", f"the attempt did not give up at its timeout and its process was killed at the hard "
                           f"time limit ({limit_s:g} s)", details={"hard_time_limit_s": limit_s})
    recorded = db.run(calls.finish(receipt_id, attempt, Result(states.FAILED, error=err), actor=worker_actor()))
    if recorded is None:
        log.info("receipt %s attempt %d: hard time limit hit after the attempt ended; nothing to record",
                 receipt_id, attempt)
        return None
    log.warning("receipt %s %s failed on attempt %d: killed at the hard time limit (%g s)", receipt_id,
                recorded.tool, attempt, limit_s)
    complete_batch(db, sender, recorded)
    return recorded


class HardLimitRecorder:
    """Records hard time limits on a thread of its own (started on first use, in the main process)."""

    def __init__(self, db: Callable[[], Database], sender: TaskSender) -> None:
        self._db = db
        self._sender = sender
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def submit(self, receipt_id: str, pid: int, limit_s: float) -> concurrent.futures.Future[Receipt | None]:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="hard-limit")
            return self._pool.submit(self._record, receipt_id, pid, limit_s)

    def _record(self, receipt_id: str, pid: int, limit_s: float) -> Receipt | None:
        try:
            return record_hard_timeout(self._db(), self._sender, receipt_id, pid, limit_s)
        except Exception:  # noqa: BLE001 - the sweeper settles the receipt when its lease runs out
            log.exception("could not record the hard time limit of receipt %s; the sweeper will settle it",
                          receipt_id)
            return None


def execute_request(recorder: HardLimitRecorder) -> type[Request]:
    """The request class of the execute task: Celery's, plus the hard time limit recorded on the receipt."""

    class ExecuteRequest(Request):
        def on_timeout(self, soft: bool, timeout: float) -> None:
            super().on_timeout(soft, timeout)
            args: Any = self.args
            if soft or self.worker_pid is None or not args:
                return
            recorder.submit(str(args[0]), int(self.worker_pid), float(timeout))

    return ExecuteRequest
