"""Runs: an agent loop as a durable, leased, fenced row, with its steps written before the next begins.

A run's life, in the row's ``status``::

    pending  -> running (claimed: attempt += 1, a lease)  -> success | failed | canceled
                running, waiting on its tool step's batch (no lease)  -> pending (the batch completed)
                waiting (a tool of the step waits for a person's approval) -> pending

Whoever advances a run claims it like a worker claims a receipt (compare-and-set, ``attempt`` as
the fencing token); every later write of that attempt is ``WHERE attempt = :attempt``, so a worker
whose lease was reclaimed cannot write over the attempt that replaced it. A step is a row of
``run_steps`` keyed by (run, index), inserted only while the attempt still holds the run: once a
model's answer is stored it is never asked for again, and a tool step's batch is found again by
its key. The sweeper gives back runs whose lease ran out (they resume from their last stored step),
resumes runs whose batch completed without them, ends runs past their deadline, and re-sends lost
messages. Times are the database's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from receipts import cursors, states
from receipts.db import Query, Steps, operation, transaction
from receipts.errors import IdempotencyMismatch, InvalidTransition, NotFound
from receipts.records import RUN_COLUMNS, Page, Run, RunStep
from receipts.webhooks.announce import announce

LIST_KIND = "runs"
OPEN = ("pending", "running", "waiting")
_RUN = ", ".join(RUN_COLUMNS)
_RUN_R = ", ".join(f"runs.{c}" for c in RUN_COLUMNS)
_OPEN_SQL = "('pending', 'running', 'waiting')"

CREATE = f"""
INSERT INTO runs ({_RUN})
VALUES (%(id)s, %(tenant_id)s, %(trace_id)s, %(model)s, 'pending', %(instructions)s, %(input)s, %(tools)s,
        %(max_iterations)s, %(max_result_chars)s, %(metadata)s, %(webhook_url)s, %(idempotency_key)s,
        %(request_hash)s, NULL, NULL, 0, 0, 0, 0, NULL, now(), now(), NULL,
        now() + make_interval(secs => %(deadline_s)s), now(), now(), NULL)
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
RETURNING {_RUN}"""
BY_KEY = f"SELECT {_RUN} FROM runs WHERE tenant_id = %(tenant_id)s AND idempotency_key = %(key)s"
GET = f"SELECT {_RUN} FROM runs WHERE id = %(id)s"
STEPS = "SELECT run_id, index, kind, data, created_at FROM run_steps WHERE run_id = %(id)s ORDER BY index"
CLAIM = f"""
UPDATE runs SET status = 'running', attempt = attempt + 1, updated_at = now(), waiting_batch_id = NULL,
       lease_expires_at = now() + make_interval(secs => %(lease_s)s)
WHERE id = %(id)s AND (status = 'pending' AND available_at <= now() + interval '1 second') IS TRUE
RETURNING {_RUN}, extract(epoch FROM deadline_at - now())::float8"""
# A step is stored only while this attempt holds the run (the fence); an index already stored is kept.
ADD_STEP = """
WITH r AS (
    UPDATE runs SET updated_at = now(), iterations = iterations + %(iterations)s,
           prompt_tokens = prompt_tokens + %(prompt_tokens)s,
           completion_tokens = completion_tokens + %(completion_tokens)s,
           lease_expires_at = now() + make_interval(secs => %(lease_s)s)
    WHERE id = %(id)s AND (status = 'running' AND attempt = %(attempt)s) IS TRUE
    RETURNING id
)
INSERT INTO run_steps (run_id, index, kind, data, created_at)
SELECT r.id, %(index)s, %(kind)s, %(data)s, now() FROM r
ON CONFLICT (run_id, index) DO UPDATE SET data = run_steps.data
RETURNING index"""
UPDATE_STEP = """
UPDATE run_steps SET data = %(data)s
WHERE run_id = %(id)s AND index = %(index)s
  AND EXISTS (SELECT 1 FROM runs WHERE id = %(id)s AND status = 'running' AND attempt = %(attempt)s)"""
LOCK_BATCH = "SELECT 1 FROM batches WHERE id = %(id)s FOR UPDATE"
WAIT = f"""
UPDATE runs SET status = %(status)s, waiting_batch_id = %(batch_id)s, lease_expires_at = NULL, updated_at = now()
WHERE id = %(id)s AND (status = 'running' AND attempt = %(attempt)s) IS TRUE
RETURNING {_RUN}"""
FINISH = f"""
UPDATE runs SET status = %(status)s, output = %(output)s, error = %(error)s, finished_at = now(), updated_at = now(),
       lease_expires_at = NULL, waiting_batch_id = NULL
WHERE id = %(id)s AND (status = 'running' AND attempt = %(attempt)s) IS TRUE
RETURNING {_RUN}"""
RENEW = """
UPDATE runs SET lease_expires_at = now() + make_interval(secs => %(lease_s)s), updated_at = now()
WHERE id = %(id)s AND (status = 'running' AND attempt = %(attempt)s) IS TRUE"""
# Hand the next step to a fresh task (due now).
REQUEUE = f"""
UPDATE runs SET status = 'pending', available_at = now(), published_at = now(), lease_expires_at = NULL,
       updated_at = now()
WHERE id = %(id)s AND (status = 'running' AND attempt = %(attempt)s) IS TRUE
RETURNING {_RUN}"""
# The batch a run waits for completed: the run is due to advance (or, with a person deciding, waits).
RESUME = f"""
UPDATE runs SET status = 'pending', available_at = now(), published_at = now(), updated_at = now()
WHERE id = %(id)s AND waiting_batch_id = %(batch_id)s AND lease_expires_at IS NULL
  AND status IN ('running', 'waiting')
RETURNING {_RUN}"""
SET_WAITING = f"""
UPDATE runs SET status = %(status)s, updated_at = now()
WHERE id = %(id)s AND waiting_batch_id = %(batch_id)s AND lease_expires_at IS NULL
  AND status IN ('running', 'waiting') AND status <> %(status)s
RETURNING {_RUN}"""
CANCEL = f"""
UPDATE runs SET status = 'canceled', error = %(error)s, finished_at = now(), updated_at = now(), lease_expires_at = NULL
WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND status IN {_OPEN_SQL}
RETURNING {_RUN}"""
# Fail a run past its deadline, whatever it is doing (a worker still holding it is fenced out).
EXPIRE = f"""
UPDATE runs SET status = 'failed', error = %(error)s, finished_at = now(), updated_at = now(), lease_expires_at = NULL,
       attempt = attempt + 1
WHERE id IN (SELECT id FROM runs WHERE status IN {_OPEN_SQL} AND deadline_at <= now()
             ORDER BY deadline_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
RETURNING {_RUN}"""
RECLAIM = f"""
UPDATE runs SET status = 'pending', available_at = now(), published_at = NULL, lease_expires_at = NULL,
       updated_at = now()
WHERE id IN (SELECT id FROM runs WHERE status = 'running' AND lease_expires_at <= now()
             ORDER BY lease_expires_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
RETURNING {_RUN}"""
# Waiting on a batch that completed (its completer died before resuming the run).
ORPHANED = f"""
UPDATE runs SET status = 'pending', available_at = now(), published_at = NULL, updated_at = now()
WHERE id IN (SELECT r.id FROM runs r JOIN batches b ON b.id = r.waiting_batch_id
             WHERE r.status IN ('running', 'waiting') AND r.lease_expires_at IS NULL AND b.status = 'completed'
             LIMIT %(batch)s FOR UPDATE OF r SKIP LOCKED)
RETURNING {_RUN}"""
FORGET_LEASES = "UPDATE runs SET lease_expires_at = now() WHERE status = 'running' AND lease_expires_at IS NOT NULL"
REPUBLISH = f"""
UPDATE runs SET published_at = now()
WHERE id IN (SELECT id FROM runs WHERE status = 'pending' AND available_at <= now()
               AND (published_at IS NULL OR published_at <= now() - make_interval(secs => %(stale_s)s))
             ORDER BY available_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
RETURNING {_RUN}"""


@dataclass(frozen=True, slots=True)
class NewRun:
    id: str
    tenant_id: str
    trace_id: str
    model: str
    instructions: str | None
    input: list[dict[str, Any]]
    tools: list[str]
    max_iterations: int
    max_result_chars: int
    deadline_s: float
    metadata: dict[str, Any]
    webhook_url: str | None
    idempotency_key: str | None
    request_hash: str | None


@dataclass(frozen=True, slots=True)
class Claimed:
    """A run this attempt holds, its steps so far, and how long it has left (database time)."""

    run: Run
    steps: list[RunStep]
    time_left_s: float


def _run(row: tuple[Any, ...]) -> Run:
    return Run(*row[:len(RUN_COLUMNS)])


def _steps(run_id: str) -> Steps[list[RunStep]]:
    rows = yield Query(STEPS, {"id": run_id}, fetch="all")
    return [RunStep(*row) for row in rows]


def _announce(run: Run) -> Steps[None]:
    event = states.RUN_EVENT_TYPES.get(run.status)
    if event is not None:
        steps = yield from _steps(run.id)
        yield from announce(tenant_id=run.tenant_id, event=event, subject=run.id, data=run.to_api(steps),
                            at=run.updated_at, webhook_url=run.webhook_url)


@transaction
def create(new: NewRun) -> Steps[tuple[Run, bool]]:
    """Accept a run (pending, to publish): ``(run, replayed)``.

    Raises:
        IdempotencyMismatch: its key was used before for a different request.
    """
    row = yield Query(CREATE, {**{k: getattr(new, k) for k in NewRun.__dataclass_fields__},
                               "input": Jsonb(new.input), "metadata": Jsonb(new.metadata)})
    if row is not None:
        return _run(row), False
    existing = _run((yield Query(BY_KEY, {"tenant_id": new.tenant_id, "key": new.idempotency_key})))
    if existing.request_hash != new.request_hash:
        raise IdempotencyMismatch(receipt_id=existing.id)
    return existing, True


@operation
def get(tenant_id: str, run_id: str) -> Steps[tuple[Run, list[RunStep]]]:
    """A tenant's run with its steps; another tenant's is NotFound, like an unknown one."""
    row = yield Query(GET, {"id": run_id})
    if row is None or row[1] != tenant_id:
        raise NotFound(f"no run {run_id}")
    return _run(row), (yield from _steps(run_id))


@operation
def list_runs(tenant_id: str, *, trace_id: str | None = None, status: str | None = None, limit: int = 50,
              cursor: str | None = None) -> Steps[Page]:
    """A tenant's runs newest first (without their steps), ``limit`` at a time."""
    position = cursors.check(LIST_KIND, cursor)
    params: dict[str, Any] = {"tenant_id": tenant_id, "trace_id": trace_id, "status": status, "limit": limit + 1}
    conditions = ["tenant_id = %(tenant_id)s", *(f"{name} = %({name})s" for name in ("trace_id", "status")
                                                 if params[name] is not None)]
    if position is not None:
        conditions.append("id < %(before_id)s")
        params["before_id"] = position[0]
    rows = yield Query(f"SELECT {_RUN} FROM runs WHERE {' AND '.join(conditions)} ORDER BY id DESC LIMIT %(limit)s",
                       params, fetch="all")
    return cursors.page(LIST_KIND, [_run(row) for row in rows[:limit]], lambda r: (r.id,), more=len(rows) > limit)


@operation
def claim(run_id: str, *, lease_s: float) -> Steps[Claimed | None]:
    """pending -> running for this attempt, with a lease; None for a duplicate or early message."""
    row = yield Query(CLAIM, {"id": run_id, "lease_s": lease_s})
    if row is None:
        return None
    return Claimed(_run(row), (yield from _steps(run_id)), row[-1])


@operation
def add_step(run: Run, index: int, kind: str, data: dict[str, Any], *, lease_s: float, iterations: int = 0,
             prompt_tokens: int = 0, completion_tokens: int = 0) -> Steps[bool]:
    """Store step ``index`` (and renew the lease) while this attempt holds the run; False when fenced out."""
    row = yield Query(ADD_STEP, {"id": run.id, "attempt": run.attempt, "index": index, "kind": kind,
                                 "data": Jsonb(data), "lease_s": lease_s, "iterations": iterations,
                                 "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens})
    return row is not None


@operation
def renew(run: Run, *, lease_s: float) -> Steps[bool]:
    """Extend this attempt's lease (while it waits to ask the model again); False when fenced out."""
    return bool((yield Query(RENEW, {"id": run.id, "attempt": run.attempt, "lease_s": lease_s}, fetch="rowcount")))


@operation
def requeue(run: Run) -> Steps[Run | None]:
    """running -> pending for this attempt, due now (publish it); None when fenced out."""
    row = yield Query(REQUEUE, {"id": run.id, "attempt": run.attempt})
    return None if row is None else _run(row)


@operation
def update_step(run: Run, index: int, data: dict[str, Any]) -> Steps[bool]:
    """Fill in a stored step (a tool step's messages once its batch completed), fenced like :func:`add_step`."""
    return bool((yield Query(UPDATE_STEP, {"id": run.id, "attempt": run.attempt, "index": index,
                                           "data": Jsonb(data)}, fetch="rowcount")))


@transaction
def wait_for(run: Run, batch_id: str, *, waiting: bool) -> Steps[Run | None]:
    """Release the run until ``batch_id`` completes (``waiting``: a call of it waits for a person).

    The release takes the batch's row lock, which its completer holds while it completes the batch and
    resumes the run: so a completer either finds the run released (and resumes it), or committed before
    this release began (and whoever released it sees the batch completed when it looks next). Without
    the lock both could miss the other, and the run would wait for the sweeper.
    """
    yield Query(LOCK_BATCH, {"id": batch_id})
    row = yield Query(WAIT, {"id": run.id, "attempt": run.attempt, "batch_id": batch_id,
                             "status": states.WAITING if waiting else states.RUNNING})
    if row is None:
        return None
    released = _run(row)
    yield from _announce(released)
    return released


@transaction
def finish(run: Run, status: str, *, output: str | None = None,
           error: dict[str, Any] | None = None) -> Steps[Run | None]:
    """running -> success | failed for this attempt (announced); None when fenced out."""
    row = yield Query(FINISH, {"id": run.id, "attempt": run.attempt, "status": status, "output": output,
                               "error": None if error is None else Jsonb(error)})
    if row is None:
        return None
    finished = _run(row)
    yield from _announce(finished)
    return finished


@transaction
def resume(run_id: str, batch_id: str) -> Steps[Run | None]:
    """The batch ``run_id`` waits for completed: the run is pending again (publish it); None otherwise."""
    row = yield Query(RESUME, {"id": run_id, "batch_id": batch_id})
    return None if row is None else _run(row)


@transaction
def set_waiting(run_id: str, batch_id: str, *, waiting: bool) -> Steps[Run | None]:
    """Mark a run waiting for its batch as waiting on a person, or not any more (announced when waiting)."""
    row = yield Query(SET_WAITING, {"id": run_id, "batch_id": batch_id,
                                    "status": states.WAITING if waiting else states.RUNNING})
    if row is None:
        return None
    changed = _run(row)
    yield from _announce(changed)
    return changed


@transaction
def cancel(tenant_id: str, run_id: str) -> Steps[Run]:
    """Any open run -> canceled; a worker holding it is fenced out at its next write.

    Raises:
        NotFound: no such run for this tenant.
        InvalidTransition: the run has ended already.
    """
    err = {"code": "canceled", "message": "canceled by request", "retryable": False, "retry_after_ms": None,
           "details": {}}
    row = yield Query(CANCEL, {"id": run_id, "tenant_id": tenant_id, "error": Jsonb(err)})
    if row is None:
        current, _ = yield from get(tenant_id, run_id).steps
        raise InvalidTransition(f"run is already {current.status}", status=current.status)
    canceled = _run(row)
    yield from _announce(canceled)
    return canceled


@dataclass(frozen=True, slots=True)
class RunSweep:
    republish: list[Run]  # pending runs to publish (reclaimed, resumed, or whose message was lost)
    expired: list[Run]  # failed past their deadline: their open receipts are to cancel


@transaction
def sweep(*, republish_after_s: float, batch: int = 200, after_restart: bool = False) -> Steps[RunSweep]:
    """Expire runs past their deadline, give back lost leases, resume orphans, collect lost messages."""
    err = {"code": "timeout", "message": "the run's deadline passed", "retryable": False, "retry_after_ms": None,
           "details": {}}
    expired = [_run(row) for row in (yield Query(EXPIRE, {"error": Jsonb(err), "batch": batch}, fetch="all"))]
    for run in expired:
        yield from _announce(run)
    if after_restart:  # the embedded mode coming back: every lease it held died with it
        yield Query(FORGET_LEASES, fetch="none")
    yield Query(RECLAIM, {"batch": batch}, fetch="none")
    yield Query(ORPHANED, {"batch": batch}, fetch="none")
    stale = 0.0 if after_restart else republish_after_s
    due = [_run(row) for row in (yield Query(REPUBLISH, {"batch": batch, "stale_s": stale}, fetch="all"))]
    return RunSweep(due, expired)
