"""The Executor on the real store: claim, run, finish or retry — every write fenced."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from receipts.db import Database
from receipts.errors import Unavailable
from receipts.messages import hard_time_limit
from receipts.records import Receipt
from receipts.store import calls
from receipts.store.calls import NewCall
from tests.support import services, sql
from tests.support.factories import TENANT, RecordingSender
from workers.backoff import Backoff
from workers.context import ToolContext
from workers.errors import PartialSuccess, RetryableError, ToolError, UpstreamError
from workers.execution import Executor, PythonKind
from workers.registry import MARK, Registry, tool
from workers.runner import Runner

RELEASE = threading.Event()  # lets blocked sync tools end when a test is over
DURING: list[Any] = []  # what write_during_outage does to the database while it runs (set by a test)
STARTED = threading.Event()
CALLS: list[str] = []


@tool(effect="read")
def greet(name: str, ctx: ToolContext) -> dict[str, Any]:
    """Greets."""
    CALLS.append("greet")
    return {"hello": name, "receipt": ctx.receipt_id, "attempt": ctx.attempt, "timeout_s": ctx.timeout_s}


@tool(effect="read")
async def add(a: int, b: int) -> dict[str, int]:
    """Adds, asynchronously."""
    await asyncio.sleep(0)
    return {"sum": a + b}


@tool(effect="read")
def refuse(reason: str) -> None:
    """Fails permanently."""
    CALLS.append("refuse")
    raise ToolError(reason, details={"why": reason})


@tool(effect="read")
def unstable(retry_after_ms: int | None = None) -> None:
    """A read whose upstream fails."""
    CALLS.append("unstable")
    raise UpstreamError("503 from upstream", retry_after_ms=retry_after_ms)


@tool(effect="write", idempotent=False)
def charge(amount: int) -> None:
    """A non-idempotent write whose upstream fails."""
    CALLS.append("charge")
    raise RetryableError("connection reset")


@tool(effect="write", idempotent=False)
def explode() -> None:
    """Raises something unexpected."""
    raise KeyError("surprise")


@tool(effect="read", timeout_s=1, max_attempts=1)
def block(seconds: float) -> dict[str, str]:
    """A sync tool that overruns its timeout."""
    STARTED.set()
    RELEASE.wait(seconds)
    return {"done": "late"}


@tool(effect="read", timeout_s=1, max_attempts=1)
async def async_block(seconds: float) -> dict[str, str]:
    """An async tool that overruns its timeout."""
    await asyncio.sleep(seconds)
    return {"done": "late"}


@tool(effect="write", idempotent=False, timeout_s=30)
def wait_for_release() -> dict[str, str]:
    """Runs until the test releases it."""
    STARTED.set()
    RELEASE.wait(30)
    return {"done": "released"}


@tool(effect="write", idempotent=False)
def returns(kind: str) -> Any:
    """Returns values that are not plain JSON."""
    CALLS.append(kind)
    if kind == "datetime":
        return {"at": datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC), "id": uuid.UUID(int=1), "n": Decimal("1.5")}
    if kind == "nan":
        return {"value": float("nan")}
    if kind == "details":
        raise ToolError("refused", details={"when": datetime(2030, 1, 1, tzinfo=UTC), "what": object()})
    if kind == "nul":  # text PostgreSQL cannot hold: a NUL, a lone surrogate, in values and keys
        return {"text": "a\x00b", "key\x00": ["\ud800!"]}
    if kind == "nul error":
        raise ValueError("bad byte \x00 in \udc80 input")
    return {"thing": object()}


@tool(effect="write", idempotent=True)
def send_batch(recipients: list[str]) -> None:
    """Sends to each recipient; the last one bounces."""
    CALLS.append("send_batch")
    raise PartialSuccess("1 of 3 bounced", output={"sent": recipients[:-1]}, details={"bounced": recipients[-1]})


@tool(effect="write", idempotent=False, timeout_s=2)
def write_during_outage() -> dict[str, str]:
    """A write that succeeds while the database goes away under the worker."""
    CALLS.append("write")
    for action in DURING:
        action()
    return {"written": "yes"}


TOOLS = [greet, add, refuse, unstable, charge, explode, block, async_block, wait_for_release, returns, send_batch,
         write_during_outage]


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    RELEASE.clear()
    STARTED.clear()
    CALLS.clear()
    DURING.clear()
    yield
    RELEASE.set()  # abandoned sync threads finish, so the test process can exit


@pytest.fixture
def sender() -> RecordingSender:
    return RecordingSender()


@pytest.fixture
def executor(db: Database, sender: RecordingSender) -> Executor:
    registry = Registry(getattr(fn, MARK) for fn in TOOLS)
    return Executor(db, {"python": PythonKind(registry)}, sender, backoff=Backoff(initial=0.2, jitter=0),
                    lease_grace_s=1.0)


def submit(db: Database, fn: Any, arguments: dict[str, Any] | None = None, deadline_s: float = 3600,
           **contract: Any) -> Receipt:
    spec = getattr(fn, MARK).spec
    if contract:
        spec = type(spec)(**{**{f: getattr(spec, f) for f in spec.__dataclass_fields__}, **contract})
    new_call = NewCall(tenant_id=TENANT, tool=spec, arguments=arguments or {}, deadline_s=deadline_s)
    receipt, _ = db.run(calls.create(new_call))
    return receipt


def get(db: Database, receipt_id: str) -> Receipt:
    return db.run(calls.get(TENANT, receipt_id))


def statuses(db: Database, receipt_id: str) -> list[str]:
    return [event.to_status for event in db.run(calls.events(TENANT, receipt_id))]


def db_now(db: Database) -> datetime:
    return sql.value(db, "SELECT now()")  # type: ignore[no-any-return]


def test_success_records_the_output_and_hands_the_tool_its_context(db: Database, executor: Executor,
                                                                   sender: RecordingSender) -> None:
    receipt = submit(db, greet, {"name": "Ada"})
    done = executor.execute(receipt.id, 31.0)
    assert done is not None
    assert done.status == "success"
    assert done.output == {"hello": "Ada", "receipt": receipt.id, "attempt": 1, "timeout_s": 30.0}
    assert done.attempt == 1 and done.error is None
    assert get(db, receipt.id) == done
    assert statuses(db, receipt.id) == ["pending", "running", "success"]
    assert sender.sent == []


def test_async_tools_run_on_the_event_loop(db: Database, executor: Executor) -> None:
    receipt = submit(db, add, {"a": 2, "b": 40})
    done = executor.execute(receipt.id)
    assert done is not None and done.status == "success" and done.output == {"sum": 42}


def test_a_duplicate_message_is_dropped_and_the_tool_runs_once(db: Database, executor: Executor) -> None:
    receipt = submit(db, greet, {"name": "Ada"})
    assert executor.execute(receipt.id) is not None
    assert executor.execute(receipt.id) is None
    assert CALLS == ["greet"]
    assert executor.execute("rcpt_unknown") is None


def test_tool_error_fails_without_retry(db: Database, executor: Executor, sender: RecordingSender) -> None:
    receipt = submit(db, refuse, {"reason": "card declined"})
    done = executor.execute(receipt.id)
    assert done is not None
    assert done.status == "failed"
    assert done.error == {"code": "tool_error", "message": "card declined", "retryable": False,
                          "retry_after_ms": None, "details": {"why": "card declined"}}
    assert CALLS == ["refuse"]
    assert sender.sent == []


def test_arguments_the_function_rejects_fail_as_invalid_arguments(db: Database, executor: Executor) -> None:
    receipt = submit(db, greet, {"name": ["not", "a", "string"]})
    done = executor.execute(receipt.id)
    assert done is not None and done.status == "failed"
    assert done.error["code"] == "invalid_arguments"  # type: ignore[index]
    assert done.error["details"]["errors"][0]["field"] == "name"  # type: ignore[index]
    assert CALLS == []


def test_retryable_error_on_a_read_schedules_a_retry_with_backoff(db: Database, executor: Executor,
                                                                 sender: RecordingSender) -> None:
    receipt = submit(db, unstable)
    before = db_now(db)
    again = executor.execute(receipt.id)
    assert again is not None
    assert again.status == "pending"
    assert again.attempt == 1
    assert again.error["code"] == "upstream_error" and again.error["retryable"]  # type: ignore[index]
    assert before + timedelta(seconds=0.2) <= again.available_at <= db_now(db) + timedelta(seconds=0.2)
    [message] = sender.sent
    assert message.name == "toolrelay.execute"
    assert message.args == [receipt.id, 31.0]  # lease: the tool's timeout plus the grace period
    assert message.options["queue"] == "tools"
    assert message.options["countdown"] == pytest.approx(0.2)
    assert statuses(db, receipt.id) == ["pending", "running", "pending"]


def test_retries_back_off_and_stop_after_max_attempts(db: Database, executor: Executor,
                                                     sender: RecordingSender) -> None:
    receipt = submit(db, unstable)
    for attempt in (1, 2):
        again = executor.execute(receipt.id)
        assert again is not None and again.status == "pending" and again.attempt == attempt
        _make_due(db, receipt.id)  # as if the countdown had passed
    final = executor.execute(receipt.id)
    assert final is not None
    assert final.status == "failed" and final.attempt == 3
    assert final.error["code"] == "upstream_error"  # type: ignore[index]
    assert [m.options["countdown"] for m in sender.sent] == [pytest.approx(0.2), pytest.approx(0.4)]
    assert CALLS == ["unstable"] * 3


def _make_due(db: Database, receipt_id: str) -> None:
    sql.execute(db, "UPDATE receipts SET available_at = now() WHERE id = %(id)s", id=receipt_id)


def test_retry_after_from_the_tool_sets_the_countdown(db: Database, executor: Executor,
                                                      sender: RecordingSender) -> None:
    receipt = submit(db, unstable, {"retry_after_ms": 3000})
    again = executor.execute(receipt.id)
    assert again is not None and again.status == "pending"
    assert again.error["retry_after_ms"] == 3000  # type: ignore[index]
    assert sender.sent[0].options["countdown"] == 3.0


def test_a_retry_due_later_than_a_minute_is_left_to_the_sweeper(db: Database, executor: Executor,
                                                                sender: RecordingSender) -> None:
    receipt = submit(db, unstable, {"retry_after_ms": 90_000})
    again = executor.execute(receipt.id)
    assert again is not None and again.status == "pending"
    assert again.published_at is None
    assert sender.sent == []


def test_no_retry_when_it_would_be_due_after_the_deadline(db: Database, executor: Executor,
                                                          sender: RecordingSender) -> None:
    receipt = submit(db, unstable, {"retry_after_ms": 120_000}, deadline_s=60)
    done = executor.execute(receipt.id)
    assert done is not None and done.status == "failed"
    assert sender.sent == []


def test_retryable_error_on_a_non_idempotent_write_fails_without_retry(db: Database, executor: Executor,
                                                                       sender: RecordingSender) -> None:
    receipt = submit(db, charge, {"amount": 5})
    done = executor.execute(receipt.id)
    assert done is not None
    assert done.status == "failed"
    assert done.error["code"] == "tool_error"  # type: ignore[index]
    assert done.error["retryable"] is True  # type: ignore[index]  # the error itself was transient...
    assert "non-idempotent" in done.error["details"]["not_retried"]  # type: ignore[index]  # ...but not retried
    assert sender.sent == []
    assert CALLS == ["charge"]
    assert executor.execute(receipt.id) is None
    assert CALLS == ["charge"]


def test_unexpected_exception_is_recorded_as_tool_error(db: Database, executor: Executor) -> None:
    receipt = submit(db, explode)
    done = executor.execute(receipt.id)
    assert done is not None and done.status == "failed"
    assert done.error["code"] == "tool_error"  # type: ignore[index]
    assert "KeyError" in done.error["message"]  # type: ignore[index]


def test_unexpected_exception_in_a_read_is_retried(db: Database, executor: Executor,
                                                   sender: RecordingSender) -> None:
    receipt = submit(db, explode, effect="read", idempotent=True)
    again = executor.execute(receipt.id)
    assert again is not None and again.status == "pending"
    assert len(sender.sent) == 1


@pytest.mark.parametrize("fn", [block, async_block], ids=["sync", "async"])
def test_a_tool_past_its_timeout_fails_with_timeout_soon_after_the_limit(db: Database, executor: Executor,
                                                                         fn: Any) -> None:
    receipt = submit(db, fn, {"seconds": 20})
    done = executor.execute(receipt.id)
    assert done is not None
    assert done.status == "failed"
    assert done.error["code"] == "timeout"  # type: ignore[index]
    # The attempt as the database dated it (claim to finish): not before the 1 s limit, and long
    # before the tool's own 20 s, however loaded the machine.
    assert done.started_at is not None and done.finished_at is not None
    assert timedelta(seconds=1) <= done.finished_at - done.started_at < timedelta(seconds=5)
    assert done.output is None


def test_the_deadline_shortens_the_attempt_timeout(db: Database, executor: Executor) -> None:
    receipt = submit(db, block, {"seconds": 20}, deadline_s=1.5, timeout_s=30)
    done = executor.execute(receipt.id)
    assert done is not None and done.error["code"] == "timeout"  # type: ignore[index]
    assert_ended_at_the_deadline(done)


def test_the_attempt_timeout_is_the_time_left_by_the_databases_clock(db: Database, executor: Executor) -> None:
    receipt = submit(db, block, {"seconds": 20}, deadline_s=3600, timeout_s=30)
    sql.execute(db, "UPDATE receipts SET deadline_at = now() + interval '1.5 seconds' WHERE id = %(id)s",
                id=receipt.id)
    done = executor.execute(receipt.id)
    assert done is not None and done.error["code"] == "timeout"  # type: ignore[index]
    assert_ended_at_the_deadline(done)


def assert_ended_at_the_deadline(done: Receipt) -> None:
    """The attempt ran out at the call's deadline, by the database's clock: its limit was the time the
    claim left it (the finish comes after the claim's now() plus that time), not the tool's 30 s."""
    assert done.finished_at is not None
    assert done.deadline_at <= done.finished_at < done.deadline_at + timedelta(seconds=5)


def test_cancel_while_running_discards_the_result(db: Database, executor: Executor) -> None:
    receipt = submit(db, wait_for_release)
    results: list[Receipt | None] = []
    runner = threading.Thread(target=lambda: results.append(executor.execute(receipt.id)))
    runner.start()
    assert STARTED.wait(10)
    assert db.run(calls.cancel(TENANT, receipt.id)).status == "canceled"
    RELEASE.set()
    runner.join(10)
    assert results == [None]
    final = get(db, receipt.id)
    assert final.status == "canceled" and final.output is None
    assert statuses(db, receipt.id) == ["pending", "running", "canceled"]


def test_a_tool_this_worker_does_not_have_fails_without_retry(db: Database, executor: Executor,
                                                              sender: RecordingSender) -> None:
    receipt = submit(db, greet, {"name": "x"}, name="not_here")
    done = executor.execute(receipt.id)
    assert done is not None and done.status == "failed"
    assert "not_here" in done.error["message"]  # type: ignore[index]
    assert sender.sent == []


def test_a_kind_this_worker_cannot_run_fails(db: Database, executor: Executor) -> None:
    receipt = submit(db, greet, {"name": "x"}, kind="integration")
    done = executor.execute(receipt.id)
    assert done is not None and done.status == "failed"
    assert "integration" in done.error["message"]  # type: ignore[index]


def test_without_a_lease_in_the_message_the_claim_takes_timeout_plus_grace(db: Database,
                                                                           executor: Executor) -> None:
    receipt = submit(db, wait_for_release)
    runner = threading.Thread(target=executor.execute, args=(receipt.id,))
    runner.start()
    assert STARTED.wait(10)
    running = get(db, receipt.id)
    assert running.lease_expires_at == running.started_at + timedelta(seconds=31)  # type: ignore[operator]
    RELEASE.set()
    runner.join(10)
    assert get(db, receipt.id).status == "success"


def test_output_is_converted_to_json_like_pydantic_does(db: Database, executor: Executor) -> None:
    receipt = submit(db, returns, {"kind": "datetime"})
    done = executor.execute(receipt.id)
    assert done is not None and done.status == "success"
    assert done.output == {"at": "2030-01-02T03:04:05Z", "id": "00000000-0000-0000-0000-000000000001", "n": "1.5"}


@pytest.mark.parametrize("kind", ["object", "nan"])
def test_output_with_no_json_form_fails_the_call_at_once(db: Database, executor: Executor,
                                                        sender: RecordingSender, kind: str) -> None:
    receipt = submit(db, returns, {"kind": kind})
    done = executor.execute(receipt.id)
    assert done is not None
    assert done.status == "failed"  # not left running for the sweeper to call outcome_unknown
    assert done.error["code"] == "tool_error"  # type: ignore[index]
    assert "JSON" in done.error["message"]  # type: ignore[index]
    assert sender.sent == []
    assert get(db, receipt.id).status == "failed"


def test_error_details_with_no_json_form_are_still_recorded(db: Database, executor: Executor) -> None:
    receipt = submit(db, returns, {"kind": "details"})
    done = executor.execute(receipt.id)
    assert done is not None and done.status == "failed"
    details = done.error["details"]  # type: ignore[index]
    assert details["when"] == "2030-01-01T00:00:00Z"
    assert details["what"].startswith("<object object")


def test_output_text_postgresql_cannot_hold_is_stored_mended_and_the_call_succeeds(db: Database,
                                                                                   executor: Executor) -> None:
    receipt = submit(db, returns, {"kind": "nul"})
    done = executor.execute(receipt.id)
    assert done is not None and done.status == "success"  # the write happened: it says so
    assert done.output == {"text": "a\ufffdb", "key\ufffd": ["?!"]}
    assert get(db, receipt.id).output == done.output


def test_an_error_whose_text_postgresql_cannot_hold_is_recorded_mended(db: Database, executor: Executor) -> None:
    receipt = submit(db, returns, {"kind": "nul error"})
    done = executor.execute(receipt.id)
    assert done is not None and done.status == "failed"  # a non-idempotent write that raised: not retried
    assert done.error["message"] == "ValueError: bad byte \ufffd in ? input"  # type: ignore[index]
    assert get(db, receipt.id).error == done.error


def test_partial_success_keeps_what_was_done_and_is_not_retried(db: Database, executor: Executor,
                                                                sender: RecordingSender) -> None:
    receipt = submit(db, send_batch, {"recipients": ["a@x", "b@x", "c@x"]})
    done = executor.execute(receipt.id)
    assert done is not None and done.status == "partially_succeeded" and done.terminal
    assert done.output == {"sent": ["a@x", "b@x"]}
    assert done.error is not None and done.error["code"] == "tool_error" and not done.error["retryable"]
    assert done.error["details"] == {"bounced": "c@x"}
    assert CALLS == ["send_batch"] and sender.sent == []
    assert statuses(db, receipt.id) == ["pending", "running", "partially_succeeded"]


def test_when_hung_sync_tools_hold_every_thread_a_call_fails_at_once_saying_why(
        db: Database, sender: RecordingSender) -> None:
    """As in ``toolrelay dev``: tools run on the worker's threads, where nothing can stop a hung sync tool."""
    registry = Registry(getattr(fn, MARK) for fn in TOOLS)
    executor = Executor(db, {"python": PythonKind(registry)}, sender, backoff=Backoff(initial=0.2, jitter=0),
                        lease_grace_s=1.0, runner=Runner(max_threads=1))
    hung = submit(db, block, {"seconds": 30})
    refused = submit(db, greet, {"name": "Ada"}, max_attempts=1)
    with concurrent.futures.ThreadPoolExecutor(1) as worker_thread:  # not the main thread: no interval timer
        first = worker_thread.submit(executor.execute, hung.id).result()
        second = worker_thread.submit(executor.execute, refused.id).result()
    assert first is not None and first.error is not None
    assert (first.status, first.error["code"]) == ("failed", "timeout")
    assert second is not None and second.error is not None
    assert (second.status, second.error["code"]) == ("failed", "internal")
    assert second.error["message"].startswith("not started: every thread for sync tools (1) is held, 1 of them by "
                                              "sync tools still running after their timeout")
    assert CALLS == []  # greet never ran


# -- the database going away under an attempt --------------------------------------------------


def take_down(db: Database) -> None:
    """No new connection to ``db``'s database is accepted and its sessions end, as in a restart."""
    name = db.url.rsplit("/", 1)[1]
    with psycopg.connect(services.PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        admin.execute("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = %s", [name])


def bring_back(db: Database) -> None:
    name = db.url.rsplit("/", 1)[1]
    with psycopg.connect(services.PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


@contextlib.contextmanager
def timed() -> Iterator[list[float]]:
    took: list[float] = []
    began = time.monotonic()
    try:
        yield took
    finally:
        took.append(time.monotonic() - began)


def test_a_result_the_database_cannot_take_is_given_up_before_the_hard_time_limit(db: Database,
                                                                                  executor: Executor) -> None:
    # Celery kills the pool process at the hard time limit and its main process then records the
    # attempt failed/timeout: for a write that ran and only waited for the database to record it,
    # that would be false. The worker gives up in time instead and the lease settles the call
    # (outcome_unknown: the write may have happened, and it is not run again).
    receipt = submit(db, write_during_outage)
    DURING.append(lambda: take_down(db))
    try:
        with timed() as took, pytest.raises(Unavailable):
            executor.execute(receipt.id, lease_s=2 + 1.0)
    finally:
        bring_back(db)
    assert CALLS == ["write"]
    assert took[0] < hard_time_limit(2, 1.0), took  # it waited 10 s for a connection, past the limit
    current = get(db, receipt.id)
    assert (current.status, current.attempt) == ("running", 1)  # nothing false recorded: the lease decides


def test_a_result_is_recorded_when_the_database_is_back_before_the_hard_time_limit(db: Database,
                                                                                   executor: Executor) -> None:
    receipt = submit(db, write_during_outage)
    DURING.append(lambda: take_down(db))
    DURING.append(lambda: threading.Timer(0.5, bring_back, [db]).start())
    try:
        done = executor.execute(receipt.id, lease_s=2 + 1.0)
    finally:
        bring_back(db)
    assert done is not None and (done.status, done.output) == ("success", {"written": "yes"})


def test_a_claim_waits_for_the_database_at_most_half_the_tools_timeout(db: Database, executor: Executor) -> None:
    # The attempt's timeout counts from when the worker took the message, as the hard time limit
    # does: a claim that waited longer would leave the tool too little of it.
    receipt = submit(db, write_during_outage)
    take_down(db)
    try:
        with timed() as took, pytest.raises(Unavailable):
            executor.execute(receipt.id, lease_s=2 + 1.0)
    finally:
        bring_back(db)
    assert CALLS == []
    assert took[0] < 2 / 2 + 0.5, took
    assert get(db, receipt.id).status == "pending"
