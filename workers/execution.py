"""Executing one receipt: claim it, run its tool, record the outcome — every write fenced.

The flow of one attempt (DESIGN.md, guarantees 2, 3 and 5)::

    claim (pending -> running, attempt += 1, lease)      zero rows: duplicate message, drop it
      run the tool, at most min(timeout_s, time left before the deadline)
    success                -> finish(success)            WHERE attempt = this attempt
    retryable, retry-safe  -> retry_later(pending, due)  WHERE attempt = this attempt
    anything else          -> finish(failed)             WHERE attempt = this attempt

A call's secret arguments come with its claim, encrypted: they are merged back into the arguments
the tool gets, and masked out of what it returns or raises before anything is written or logged
(:mod:`receipts.secret_arguments`).

Each attempt is a span (``execute <tool>``) whose parent is the trace context the call was accepted
under, read from the claimed row (the row, not the broker message, so a retry or a re-sent message
continues the same trace). While it runs, the receipt's fields are bound for the log lines and the
trace context is current, so the tool's own requests carry it (``traceparent``). The call's end is
logged and counted where every transition passes (:mod:`receipts.telemetry.calls`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode
from pydantic_core import PydanticSerializationError, to_jsonable_python

from agents.batches import completion
from receipts import states
from receipts.db import Database, Op
from receipts.errors import Unavailable
from receipts.messages import MAX_COUNTDOWN_S, TaskSender, publish_execute, publish_run
from receipts.records import Receipt
from receipts.secret_arguments import reveal, scrub
from receipts.secretbox import SecretBox, SecretKeyMissing, SecretUnreadable
from receipts.storable import mended
from receipts.store import calls
from receipts.store.calls import Lease, Result, error
from receipts.telemetry import logfields, tracing
from workers.backoff import Backoff
from workers.budget import Budget
from workers.context import ToolContext
from workers.errors import PartialSuccess, ToolError, ToolFailure
from workers.metrics import WorkerMetrics
from workers.registry import Registry
from workers.runner import Invocation, Runner

log = logging.getLogger(__name__)
tracer = trace.get_tracer("toolrelay.workers")

RECORD_RETRY_S = 0.2  # pause between tries to record an attempt's end while the database is unavailable


def worker_actor(pid: int | None = None) -> str:
    """Who claimed an attempt, as the timeline records it: this host and the process (``pid``, default this one)."""
    return f"worker:{socket.gethostname()}:{os.getpid() if pid is None else pid}"


def complete_batch(db: Database, sender: TaskSender, recorded: Receipt | None, *,
                   wait_s: float | None = None) -> None:
    """If ``recorded`` was the last call of its batch to end, complete the batch and resume the run waiting
    for it (the sweeper does both, should this fail, or the database not answer within ``wait_s``)."""
    op = completion(recorded)
    if op is None:
        return
    try:
        run = db.run(op, wait_s=wait_s)
        if run is not None:
            publish_run(sender, run.id)
    except Exception:  # noqa: BLE001 - the call's end is committed; the sweeper completes the batch
        log.exception("could not complete the batch of receipt %s; the sweeper will", recorded and recorded.id)


class KindRunner(Protocol):
    """Prepares the invocation of a tool of one kind (python, api_call, integration, system)."""

    def prepare(self, receipt: Receipt, context: ToolContext) -> Invocation: ...


class PythonKind:
    """``@tool`` functions registered in this worker process."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def prepare(self, receipt: Receipt, context: ToolContext) -> Invocation:
        item = self.registry.get(receipt.tool)
        if item is None:
            raise ToolFailure(f"no tool {receipt.tool!r} is registered in this worker (check TOOLRELAY_TOOL_MODULES "
                              f"and the queues it consumes)", retryable=False)
        arguments = receipt.input if isinstance(receipt.input, dict) else {}
        return Invocation(item.fn, item.arguments.bind(arguments, context), item.is_async)


def json_output(value: Any) -> Any:
    """``value`` as the JSON the receipt stores, converted as pydantic does (datetimes, UUIDs, decimals, models).

    Checked here, before the fenced write: a value with no JSON form (or NaN, which PostgreSQL's
    jsonb refuses) would otherwise fail the write itself and leave the receipt running until its
    lease expired — and a non-idempotent write that did finish would then be reported outcome_unknown.
    For the same reason text that PostgreSQL cannot hold (a NUL character, a lone surrogate) is stored
    mended (:func:`receipts.storable.mended`): the call did what it did, and says so.

    Raises:
        ToolError: the value cannot be stored as JSON.
    """
    try:
        converted = to_jsonable_python(value)
        json.dumps(converted, allow_nan=False)
    except (PydanticSerializationError, TypeError, ValueError) as exc:
        raise ToolError(f"the tool returned a value that cannot be stored as JSON: {exc}") from exc
    return mended(converted)  # text PostgreSQL cannot hold (a NUL, a lone surrogate) is stored mended


def failure_error(exc: BaseException) -> dict[str, Any]:
    """The receipt ``error`` for an exception a tool raised (its text mended where PostgreSQL could not hold it)."""
    return mended(_failure_error(exc))  # type: ignore[no-any-return]


def _failure_error(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, ToolFailure):
        return error(exc.code, exc.message, retryable=exc.retryable, retry_after_ms=exc.retry_after_ms,
                     details=to_jsonable_python(exc.details, fallback=repr))
    # An unexpected exception: report it, and let retry-safe tools try again.
    return error("tool_error", f"{type(exc).__name__}: {exc}", retryable=True)


class Executor:
    """Runs receipts. One per worker process; every dependency is passed in."""

    def __init__(self, db: Database, kinds: Mapping[str, KindRunner], sender: TaskSender, *,
                 backoff: Backoff, lease_grace_s: float, runner: Runner | None = None, secret_key: str = "",
                 metrics: WorkerMetrics | None = None) -> None:
        self.db = db
        self.secret_key = secret_key
        self.kinds = kinds
        self.sender = sender
        self.backoff = backoff
        self.lease_grace_s = lease_grace_s
        self.runner = runner or Runner()
        self.metrics = metrics

    @property
    def actor(self) -> str:
        """This process, read at each use: an executor built before a fork serves the pool processes."""
        return worker_actor()

    def execute(self, receipt_id: str, lease_s: float | None = None) -> Receipt | None:
        """Run one attempt of ``receipt_id``; returns the receipt as recorded, None if not claimed.

        The attempt's time limit is the tool's timeout or the time the call has left, whichever is
        shorter; the time left comes with the claim (the database's clock), and this process measures
        what it spends with its monotonic clock, so a host whose clock is wrong times attempts right.
        The tool's timeout counts from when this began, and waits for the database are bounded, so
        the task returns before its hard time limit (:mod:`workers.budget`).

        Raises:
            Unavailable: the database did not answer in time, to claim the call (it stays pending) or
                to record how the attempt ended (the lease settles it).
        """
        began = time.monotonic()
        if lease_s is None:
            current = self.db.run(calls.load(receipt_id))
            if current is None:
                log.warning("execute: no receipt %s; message dropped", receipt_id)
                return None
            lease_s = current.timeout_s + self.lease_grace_s
        # The message's lease is the tool's timeout plus the grace (receipts.messages.execute_call).
        budget = Budget(max(lease_s - self.lease_grace_s, 0.0), self.lease_grace_s, began)
        claiming = time.time_ns()  # the span starts with the claim, which says which trace it belongs to
        lease = self.db.run(calls.claim(receipt_id, lease_s=lease_s, actor=self.actor), wait_s=budget.claim_wait_s)
        if lease is None:
            log.debug("execute: %s not claimable (duplicate or early message); dropped", receipt_id)
            return None
        receipt = lease.receipt
        attributes: dict[str, str | int] = {"toolrelay.receipt_id": receipt.id, "toolrelay.tool": receipt.tool,
                                             "toolrelay.kind": receipt.kind, "toolrelay.attempt": receipt.attempt,
                                             "toolrelay.trace_id": receipt.trace_id}
        with tracer.start_as_current_span(f"execute {receipt.tool}", context=tracing.context_of(receipt.traceparent),
                                          kind=SpanKind.CONSUMER, start_time=claiming, attributes=attributes,
                                          record_exception=False) as span, \
                logfields.bound(receipt_id=receipt.id, trace_id=receipt.trace_id, tenant=receipt.tenant_id,
                                tool=receipt.tool):
            recorded = self._attempt(lease, budget)
            if recorded is not None:
                span.set_attribute("toolrelay.status", recorded.status)
                if recorded.status == states.FAILED and recorded.error:
                    span.set_status(StatusCode.ERROR, f"{recorded.error.get('code')}: {recorded.error.get('message')}")
        return recorded

    def _attempt(self, lease: Lease, budget: Budget) -> Receipt | None:
        """Run the claimed attempt and record how it ended (fenced); the receipt as recorded."""
        receipt, started = lease.receipt, time.monotonic()
        timeout = min(receipt.timeout_s, lease.time_left_s, budget.attempt_s())
        context = ToolContext(receipt_id=receipt.id, tenant_id=receipt.tenant_id, trace_id=receipt.trace_id,
                              attempt=receipt.attempt, deadline_at=receipt.deadline_at, timeout_s=timeout)
        secrets: list[Any] = []
        try:
            secrets = self._secrets(lease)
            kind = self.kinds.get(receipt.kind)
            if kind is None:
                raise ToolFailure(f"this worker cannot run tools of kind {receipt.kind!r}")
            given = replace(receipt, input=reveal(receipt.input, secrets)) if secrets else receipt
            result = self.runner.run(kind.prepare(given, context), timeout)
            outcome = Result(states.SUCCESS, output=scrub(json_output(result), secrets))
        except PartialSuccess as exc:
            outcome = Result(states.PARTIALLY_SUCCEEDED, output=scrub(json_output(exc.output), secrets),
                             error=scrub(failure_error(exc), secrets))
        except Exception as exc:  # noqa: BLE001 - every failure of a tool is recorded, none escapes
            self._ran(receipt, started)
            return self._failed(lease, budget, started, exc, secrets)
        self._ran(receipt, started)
        recorded = self._record(receipt, budget, lambda: calls.finish(receipt.id, receipt.attempt, outcome,
                                                                      actor=self.actor))
        self._log_fenced(receipt, recorded)
        self._complete_batch(recorded, budget)
        return recorded

    def _record(self, receipt: Receipt, budget: Budget, write: Callable[[], Op[Receipt | None]]) -> Receipt | None:
        """Run ``write()`` (a fenced end of the attempt), again while the database is unavailable, until the
        budget's time to record is up.

        A write that failed may have committed (its answer lost with the connection): written again,
        it is fenced out (None), as if the receipt had moved on.

        Raises:
            Unavailable: the database still does not answer; the lease settles the call.
        """
        while True:
            try:
                return self.db.run(write(), wait_s=budget.record_s())
            except Unavailable as exc:
                if budget.record_s() <= RECORD_RETRY_S:
                    log.warning("receipt %s attempt %d: its end could not be recorded before the hard time limit "
                                "(%s); the sweeper settles it when its lease runs out", receipt.id, receipt.attempt,
                                exc.message)
                    raise
                time.sleep(RECORD_RETRY_S)

    def _secrets(self, lease: Lease) -> list[Any]:
        """The call's secret arguments, ``[path, value]`` pairs (none for most calls).

        Raises:
            ToolError: they cannot be read here (no TOOLRELAY_SECRET_KEY, or another one).
        """
        if lease.secret_input is None:
            return []
        try:
            return list(SecretBox(self.secret_key).decrypt_json(lease.secret_input))
        except SecretKeyMissing:
            raise ToolError("the call has secret arguments and this worker has no TOOLRELAY_SECRET_KEY") from None
        except SecretUnreadable:
            raise ToolError("the call's secret arguments cannot be decrypted (was TOOLRELAY_SECRET_KEY changed?)"
                            ) from None

    def _ran(self, receipt: Receipt, started: float) -> None:
        if self.metrics is not None:
            self.metrics.run_time.labels(receipt.tool).observe(time.monotonic() - started)

    def _failed(self, lease: Lease, budget: Budget, started: float, exc: BaseException,
                secrets: list[Any]) -> Receipt | None:
        receipt = lease.receipt
        err = scrub(failure_error(exc), secrets)
        delay = self.backoff.delay(receipt.attempt, err["retry_after_ms"])
        time_left = lease.time_left_s - (time.monotonic() - started)
        if err["retryable"] and receipt.retry_safe and receipt.attempt < receipt.max_attempts and delay < time_left:
            publish_now = delay <= MAX_COUNTDOWN_S
            recorded = self._record(receipt, budget, lambda: calls.retry_later(
                receipt.id, receipt.attempt, err, delay_s=delay, published=publish_now, actor=self.actor))
            if recorded is not None and publish_now:
                publish_execute(self.sender, recorded, grace_s=self.lease_grace_s, countdown=delay)
            log.info("receipt %s %s attempt %d failed (%s: %s); retry in %.1f s", receipt.id, receipt.tool,
                     receipt.attempt, err["code"], err["message"], delay,
                     extra={"attempt": receipt.attempt, "error_code": err["code"], "retry_in_s": round(delay, 3)})
        else:
            if err["retryable"] and not receipt.retry_safe:
                err = {**err, "details": {**err["details"], "not_retried": "the tool is a non-idempotent write"}}
            recorded = self._record(receipt, budget, lambda: calls.finish(
                receipt.id, receipt.attempt, Result(states.FAILED, error=err), actor=self.actor))
        self._log_fenced(receipt, recorded)
        self._complete_batch(recorded, budget)
        return recorded

    def _complete_batch(self, recorded: Receipt | None, budget: Budget) -> None:
        complete_batch(self.db, self.sender, recorded, wait_s=budget.record_s())

    def _log_fenced(self, receipt: Receipt, recorded: Receipt | None) -> None:
        if recorded is None:
            log.warning("receipt %s attempt %d: result discarded, the receipt moved on (canceled or reclaimed)",
                        receipt.id, receipt.attempt)
