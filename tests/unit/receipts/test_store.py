"""The receipt store: create-or-replay, CAS claim, fenced writes, cancel, queries."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest

from receipts import cursors, states
from receipts.db import Announce, Database
from receipts.errors import IdempotencyMismatch, InvalidTransition, NotFound
from receipts.records import Receipt
from receipts.store import calls
from receipts.store.calls import NewCall, Result, error, fingerprint
from tests.support import sql
from tests.support.factories import OTHER_TENANT, TENANT, call, spec


def db_now(db: Database) -> datetime:
    """The database's clock, read in a statement of its own."""
    return sql.value(db, "SELECT now()")  # type: ignore[no-any-return]


def count_receipts(db: Database) -> int:
    return int(sql.value(db, "SELECT count(*) FROM receipts"))


def timeline(db: Database, receipt_id: str) -> list[tuple[str | None, str, int, str]]:
    return [(e.from_status, e.to_status, e.attempt, e.actor) for e in db.run(calls.events(TENANT, receipt_id))]


def create(db: Database, new_call: NewCall, status: str = states.PENDING) -> Receipt:
    receipt, _ = db.run(calls.create(new_call, status=status))
    return receipt


def claim(db: Database, receipt_id: str, actor: str = "w", lease_s: float = 30) -> Receipt | None:
    lease = db.run(calls.claim(receipt_id, lease_s=lease_s, actor=actor))
    return None if lease is None else lease.receipt


def get(db: Database, receipt_id: str, tenant_id: str = TENANT) -> Receipt:
    return db.run(calls.get(tenant_id, receipt_id))


# -- create and idempotency --------------------------------------------------------------------


def test_create_stores_a_pending_receipt_with_the_tool_contract(db: Database) -> None:
    tool = spec("send", effect="write", idempotent=False, timeout_s=7, max_attempts=2)
    before = db_now(db)
    receipt, replayed = db.run(calls.create(call(tool, arguments={"to": "x"}, deadline_s=60, trace_id="trace_a",
                                                 call_id="call_1", metadata={"k": "v"})))
    assert not replayed
    assert receipt.id.startswith("rcpt_")
    assert receipt.status == "pending"
    assert receipt.attempt == 0
    assert (receipt.tool, receipt.kind, receipt.effect, receipt.idempotent) == ("send", "python", "write", False)
    assert (receipt.timeout_s, receipt.max_attempts, receipt.queue) == (7, 2, "tools")
    assert (receipt.trace_id, receipt.call_id, receipt.metadata) == ("trace_a", "call_1", {"k": "v"})
    assert receipt.input == {"to": "x"}
    assert receipt.output is None and receipt.error is None
    assert before <= receipt.created_at <= db_now(db)
    assert receipt.deadline_at == receipt.created_at + timedelta(seconds=60)
    assert receipt.published_at == receipt.created_at  # the gateway publishes right after the commit
    assert get(db, receipt.id) == receipt
    assert timeline(db, receipt.id) == [(None, "pending", 0, "api")]


def test_create_generates_a_trace_id_when_none_is_given(db: Database) -> None:
    first = create(db, call())
    second = create(db, call())
    assert first.trace_id.startswith("trace_") and second.trace_id.startswith("trace_")
    assert first.trace_id != second.trace_id
    assert first.id != second.id


def test_duplicate_key_with_same_request_returns_same_receipt(db: Database) -> None:
    request_hash = fingerprint({"tool": "echo", "arguments": {"x": 1}})
    first, replayed_first = db.run(calls.create(call(idempotency_key="k1", request_hash=request_hash)))
    again, replayed_again = db.run(calls.create(call(idempotency_key="k1", request_hash=request_hash)))
    assert (replayed_first, replayed_again) == (False, True)
    assert again == first
    assert count_receipts(db) == 1
    assert timeline(db, first.id) == [(None, "pending", 0, "api")]


def test_duplicate_key_with_different_request_is_a_mismatch(db: Database) -> None:
    first = create(db, call(idempotency_key="k1", request_hash=fingerprint({"arguments": {"x": 1}})))
    with pytest.raises(IdempotencyMismatch) as caught:
        db.run(calls.create(call(arguments={"x": 2}, idempotency_key="k1",
                                 request_hash=fingerprint({"arguments": {"x": 2}}))))
    assert caught.value.details["receipt_id"] == first.id
    assert count_receipts(db) == 1


def test_create_awaited_on_an_event_loop_is_create(db: Database) -> None:
    """The gateway's awaited create (on the async pool) stores and replays as the blocking one does."""
    request_hash = fingerprint({"tool": "echo", "arguments": {"x": 1}})
    announced: list[tuple[str, int]] = []
    db.subscribe(lambda item: announced.append((item.subject.status, item.messages)))

    async def scenario() -> tuple[Receipt, bool, Receipt, bool, IdempotencyMismatch]:
        await db.open_async(2)
        try:
            first, replayed_first = await db.arun(calls.create(call(idempotency_key="k1", request_hash=request_hash)))
            again, replayed_again = await db.arun(calls.create(call(idempotency_key="k1", request_hash=request_hash)))
            with pytest.raises(IdempotencyMismatch) as caught:
                await db.arun(calls.create(call(arguments={"x": 2}, idempotency_key="k1",
                                                request_hash=fingerprint({"arguments": {"x": 2}}))))
            return first, replayed_first, again, replayed_again, caught.value
        finally:
            await db.close_async()

    first, replayed_first, again, replayed_again, mismatch = asyncio.run(scenario())
    assert (replayed_first, replayed_again) == (False, True)
    assert again == first == get(db, first.id)
    assert (first.status, first.attempt, first.input, first.idempotency_key) == ("pending", 0, {"x": 1}, "k1")
    assert first.published_at == first.created_at
    assert mismatch.details["receipt_id"] == first.id
    assert count_receipts(db) == 1
    assert timeline(db, first.id) == [(None, "pending", 0, "api")]
    assert announced == [("pending", 0)]

    async def after_close() -> None:
        await db.arun(calls.load(first.id))

    with pytest.raises(RuntimeError, match="not open"):  # closed: the event loop's pool is gone
        asyncio.run(after_close())


def test_idempotency_keys_are_scoped_to_the_tenant(db: Database) -> None:
    request_hash = fingerprint({"x": 1})
    mine = create(db, call(idempotency_key="k1", request_hash=request_hash))
    theirs, replayed = db.run(calls.create(call(tenant_id=OTHER_TENANT, idempotency_key="k1",
                                                request_hash=request_hash)))
    assert not replayed
    assert theirs.id != mine.id


def test_fingerprint_ignores_key_order() -> None:
    assert fingerprint({"a": 1, "b": {"c": 2, "d": 3}}) == fingerprint({"b": {"d": 3, "c": 2}, "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})


def test_a_fingerprint_is_the_hash_of_the_bytes_stored_fingerprints_were_made_of() -> None:
    # The hashes of requests accepted before must keep matching their replays: json.dumps's bytes.
    request = {"z": [1.5, 1e16, 2**70, None, True], "é": "ünï\u2028\x00", "a": {"nan": float("nan")},
               "t": datetime(2026, 1, 1)}
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), default=str).encode()
    assert fingerprint(request) == hashlib.sha256(canonical).hexdigest()
    assert fingerprint(request, "k") == hmac.new(b"k", canonical, hashlib.sha256).hexdigest()


def test_concurrent_duplicates_under_one_key_create_exactly_one_receipt(db: Database) -> None:
    threads = 16
    barrier = threading.Barrier(threads)
    request_hash = fingerprint({"x": 1})

    def submit(_: int) -> tuple[str, bool]:
        barrier.wait()
        receipt, replayed = db.run(calls.create(call(idempotency_key="same", request_hash=request_hash)))
        return receipt.id, replayed

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(submit, range(threads)))
    assert len({receipt_id for receipt_id, _ in results}) == 1
    assert sum(1 for _, replayed in results if not replayed) == 1
    assert count_receipts(db) == 1
    assert len(db.run(calls.events(TENANT, results[0][0]))) == 1


# -- claim, finish, retry ------------------------------------------------------------------------


def test_claim_is_compare_and_set(db: Database) -> None:
    receipt = create(db, call())
    claimed = claim(db, receipt.id, actor="worker-a")
    assert claimed is not None
    assert claimed.status == "running"
    assert claimed.attempt == 1
    assert claimed.started_at is not None
    assert claimed.lease_expires_at == claimed.started_at + timedelta(seconds=30)
    assert claim(db, receipt.id, actor="worker-b") is None
    assert get(db, receipt.id).attempt == 1
    assert timeline(db, receipt.id)[-1] == ("pending", "running", 1, "worker-a")


def test_concurrent_claims_let_exactly_one_worker_win(db: Database) -> None:
    receipt = create(db, call())
    barrier = threading.Barrier(8)

    def attempt(_: int) -> bool:
        barrier.wait()
        return claim(db, receipt.id) is not None

    with ThreadPoolExecutor(8) as pool:
        wins = list(pool.map(attempt, range(8)))
    assert wins.count(True) == 1
    assert get(db, receipt.id).attempt == 1


def test_claim_of_unknown_receipt_returns_none(db: Database) -> None:
    assert claim(db, "rcpt_nope") is None


def shift(db: Database, receipt_id: str, column: str, seconds: float) -> None:
    """Move one of a receipt's times by ``seconds`` (negative: into the past), as time passing would."""
    assert column in {"deadline_at", "available_at", "lease_expires_at", "published_at"}
    sql.execute(db, f"UPDATE receipts SET {column} = {column} + make_interval(secs => %(s)s) WHERE id = %(id)s",
                s=seconds, id=receipt_id)


def test_claim_waits_for_a_scheduled_retry_and_refuses_after_the_deadline(db: Database) -> None:
    receipt = create(db, call(deadline_s=60))
    shift(db, receipt.id, "deadline_at", -60)  # as if the call's 60 s had passed
    assert claim(db, receipt.id) is None
    shift(db, receipt.id, "deadline_at", 60)
    assert claim(db, receipt.id) is not None
    db.run(calls.retry_later(receipt.id, 1, error("upstream_error", "503", retryable=True), delay_s=30,
                             published=True, actor="w"))
    assert claim(db, receipt.id) is None  # early message: dropped
    shift(db, receipt.id, "available_at", -30)  # 30 s later: due
    assert claim(db, receipt.id) is not None


def test_a_claim_near_the_deadline_leases_the_time_left_plus_the_grace(db: Database) -> None:
    # The attempt gets at most the time left before the deadline: a lease of the tool's whole timeout
    # would keep a call whose worker died running (and unsettled) long after its deadline.
    receipt = create(db, call(spec(timeout_s=30), deadline_s=60))
    shift(db, receipt.id, "deadline_at", -58)  # 2 s left
    claimed = claim(db, receipt.id, lease_s=30 + 5)  # the tool's timeout plus a grace of 5 s
    assert claimed is not None and claimed.lease_expires_at is not None
    assert claimed.lease_expires_at == claimed.deadline_at + timedelta(seconds=5)
    # With time to spare, the lease is the whole timeout plus the grace, as before.
    roomy = create(db, call(spec(timeout_s=30), deadline_s=600))
    claimed = claim(db, roomy.id, lease_s=30 + 5)
    assert claimed is not None and claimed.started_at is not None
    assert claimed.lease_expires_at == claimed.started_at + timedelta(seconds=35)


def test_finish_records_the_outcome(db: Database) -> None:
    receipt = create(db, call())
    claim(db, receipt.id)
    done = db.run(calls.finish(receipt.id, 1, Result("success", output={"y": [1, 2]}), actor="w"))
    assert done is not None
    assert done.status == "success"
    assert done.output == {"y": [1, 2]}
    assert done.error is None
    assert done.finished_at is not None and done.lease_expires_at is None
    assert get(db, receipt.id) == done


def test_finish_is_fenced_by_the_attempt(db: Database) -> None:
    receipt = create(db, call())
    claim(db, receipt.id)
    assert db.run(calls.finish(receipt.id, 2, Result("success", output="stale"), actor="w")) is None
    assert db.run(calls.finish(receipt.id, 0, Result("success", output="stale"), actor="w")) is None
    assert get(db, receipt.id).status == "running"


def test_a_reclaimed_attempt_cannot_overwrite_the_next_one(db: Database) -> None:
    receipt = create(db, call())
    claim(db, receipt.id, actor="slow-worker")
    # The lease ran out: the sweeper put it back, a second worker took attempt 2.
    db.run(calls.retry_later(receipt.id, 1, error("internal", "lost", retryable=True), delay_s=0, published=False,
                             actor="sweeper"))
    assert claim(db, receipt.id, actor="fast-worker") is not None
    assert db.run(calls.finish(receipt.id, 1, Result("success", output="from attempt 1"), actor="slow-worker")) is None
    final = db.run(calls.finish(receipt.id, 2, Result("success", output="from attempt 2"), actor="fast-worker"))
    assert final is not None and final.output == "from attempt 2"


def test_retry_later_puts_the_receipt_back_with_its_error(db: Database) -> None:
    receipt = create(db, call())
    claim(db, receipt.id)
    err = error("upstream_error", "503 from upstream", retryable=True, retry_after_ms=2000)
    before = db_now(db)
    again = db.run(calls.retry_later(receipt.id, 1, err, delay_s=2.0, published=True, actor="w"))
    assert again is not None
    assert again.status == "pending"
    assert again.attempt == 1
    assert again.error == err
    assert again.lease_expires_at is None
    assert before + timedelta(seconds=2) <= again.available_at <= db_now(db) + timedelta(seconds=2)
    assert again.published_at == again.available_at
    assert db.run(calls.retry_later(receipt.id, 1, err, delay_s=0, published=True, actor="w")) is None  # not running
    assert timeline(db, receipt.id)[-1] == ("running", "pending", 1, "w")
    assert db.run(calls.events(TENANT, receipt.id))[-1].detail == {"error": err, "retry_in_s": 2.0}


def test_retry_later_unpublished_leaves_the_message_to_the_sweeper(db: Database) -> None:
    receipt = create(db, call())
    claim(db, receipt.id)
    again = db.run(calls.retry_later(receipt.id, 1, error("timeout", "slow", retryable=True), delay_s=120,
                                     published=False, actor="w"))
    assert again is not None and again.published_at is None


def test_retry_later_is_fenced_by_the_attempt(db: Database) -> None:
    receipt = create(db, call())
    claim(db, receipt.id)
    assert db.run(calls.retry_later(receipt.id, 3, error("timeout", "slow"), delay_s=0, published=True,
                                    actor="w")) is None
    assert get(db, receipt.id).status == "running"


# -- cancel ------------------------------------------------------------------------------------------


def test_cancel_pending_prevents_the_claim(db: Database) -> None:
    receipt = create(db, call())
    canceled = db.run(calls.cancel(TENANT, receipt.id))
    assert canceled.status == "canceled"
    assert canceled.error is not None and canceled.error["code"] == "canceled"
    assert canceled.finished_at is not None
    assert claim(db, receipt.id) is None


def test_cancel_running_discards_the_workers_result(db: Database) -> None:
    receipt = create(db, call())
    claim(db, receipt.id)
    assert db.run(calls.cancel(TENANT, receipt.id, actor="api")).status == "canceled"
    assert db.run(calls.finish(receipt.id, 1, Result("success", output="late"), actor="w")) is None
    assert db.run(calls.retry_later(receipt.id, 1, error("timeout", "t"), delay_s=0, published=True,
                                    actor="w")) is None
    final = get(db, receipt.id)
    assert final.status == "canceled"
    assert final.output is None
    assert timeline(db, receipt.id) == [
        (None, "pending", 0, "api"), ("pending", "running", 1, "w"), ("running", "canceled", 1, "api")
    ]


def test_cancel_of_a_terminal_receipt_is_an_invalid_transition(db: Database) -> None:
    receipt = create(db, call())
    claim(db, receipt.id)
    db.run(calls.finish(receipt.id, 1, Result("success", output=1), actor="w"))
    with pytest.raises(InvalidTransition):
        db.run(calls.cancel(TENANT, receipt.id))
    assert get(db, receipt.id).status == "success"


def test_cancel_of_another_tenants_receipt_is_not_found(db: Database) -> None:
    receipt = create(db, call())
    with pytest.raises(NotFound):
        db.run(calls.cancel(OTHER_TENANT, receipt.id))
    assert get(db, receipt.id).status == "pending"


def test_waiting_receipt_completes_once(db: Database) -> None:
    receipt = create(db, call(spec("ask", kind="function")), status=states.WAITING)
    assert receipt.status == "waiting"
    done = db.run(calls.complete_waiting(TENANT, receipt.id, Result("success", output={"answer": 42}),
                                         actor="client"))
    assert done.status == "success" and done.output == {"answer": 42}
    with pytest.raises(InvalidTransition):
        db.run(calls.complete_waiting(TENANT, receipt.id, Result("success", output={"answer": 0}), actor="client"))
    assert get(db, receipt.id).output == {"answer": 42}


# -- reading ---------------------------------------------------------------------------------------


def test_get_hides_other_tenants_and_unknown_ids_alike(db: Database) -> None:
    receipt = create(db, call())
    with pytest.raises(NotFound):
        get(db, receipt.id, OTHER_TENANT)
    with pytest.raises(NotFound):
        get(db, "rcpt_unknown")
    with pytest.raises(NotFound):
        db.run(calls.events(OTHER_TENANT, receipt.id))
    assert db.run(calls.load(receipt.id)) == receipt
    assert db.run(calls.load("rcpt_unknown")) is None


def newest_first(*ids: str) -> list[str]:
    """Listing order: by id, descending (ids sort by creation time, to the millisecond)."""
    return sorted(ids, reverse=True)


def test_list_filters_by_trace_status_and_tool(db: Database) -> None:
    a = create(db, call(spec("echo"), trace_id="trace_1"))
    b = create(db, call(spec("sleep"), trace_id="trace_1"))
    c = create(db, call(spec("echo"), trace_id="trace_2"))
    create(db, call(spec("echo"), tenant_id=OTHER_TENANT, trace_id="trace_1"))
    claim(db, b.id)

    def ids(**filters: str) -> list[str]:
        return [r.id for r in db.run(calls.list_receipts(TENANT, **filters)).items]  # type: ignore[arg-type]

    assert ids() == newest_first(c.id, b.id, a.id)  # newest first, only this tenant's
    assert ids(trace_id="trace_1") == newest_first(b.id, a.id)
    assert ids(status="running") == [b.id]
    assert ids(status="pending") == newest_first(c.id, a.id)
    assert ids(tool="echo") == newest_first(c.id, a.id)
    assert ids(trace_id="trace_1", tool="echo") == [a.id]
    assert ids(trace_id="trace_none") == []


def test_list_pages_through_everything_with_the_cursor(db: Database) -> None:
    created = [create(db, call(arguments={"n": n})).id for n in range(8)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = db.run(calls.list_receipts(TENANT, limit=3, cursor=cursor))
        pages += 1
        assert len(page.items) <= 3
        seen += [r.id for r in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert pages == 3
    assert seen == sorted(created, reverse=True)


def test_list_of_exactly_one_full_page_has_no_next_cursor(db: Database) -> None:
    for n in range(3):
        create(db, call(arguments={"n": n}))
    page = db.run(calls.list_receipts(TENANT, limit=3))
    assert len(page.items) == 3
    assert page.next_cursor is None


def test_events_are_the_timeline_oldest_first(db: Database) -> None:
    receipt = create(db, call())
    claim(db, receipt.id, actor="w1")
    err = error("upstream_error", "503", retryable=True)
    db.run(calls.retry_later(receipt.id, 1, err, delay_s=0, published=True, actor="w1"))
    claim(db, receipt.id, actor="w2")
    db.run(calls.finish(receipt.id, 2, Result("failed", error=error("tool_error", "no")), actor="w2"))
    events = db.run(calls.events(TENANT, receipt.id))
    assert [(e.from_status, e.to_status, e.attempt, e.actor) for e in events] == [
        (None, "pending", 0, "api"),
        ("pending", "running", 1, "w1"),
        ("running", "pending", 1, "w1"),
        ("pending", "running", 2, "w2"),
        ("running", "failed", 2, "w2"),
    ]
    assert [e.at for e in events] == sorted(e.at for e in events)
    assert events[-1].detail["error"]["code"] == "tool_error"
    assert events[0].to_api()["at"].endswith("Z")


def test_every_transition_is_logged_in_the_same_transaction(db: Database) -> None:
    receipt = create(db, call())
    claim(db, receipt.id)
    db.run(calls.finish(receipt.id, 1, Result("success", output=1), actor="w"))
    rows = sql.rows(db, "SELECT to_status FROM receipt_events WHERE receipt_id = %(id)s ORDER BY id", id=receipt.id)
    assert [to_status for (to_status,) in rows] == ["pending", "running", "success"]


def test_listeners_hear_every_committed_transition(db: Database) -> None:
    heard: list[tuple[str, str]] = []

    def listener(item: Announce) -> None:
        heard.append((item.subject.id, item.subject.status))

    db.subscribe(listener)
    receipt = create(db, call())
    claim(db, receipt.id)
    db.run(calls.finish(receipt.id, 1, Result("success", output=1), actor="w"))
    assert db.run(calls.finish(receipt.id, 1, Result("success", output=1), actor="w")) is None
    assert heard == [(receipt.id, "pending"), (receipt.id, "running"), (receipt.id, "success")]


def test_receipt_to_api_has_the_documented_shape(db: Database) -> None:
    receipt = create(db, call())
    body = receipt.to_api()
    assert set(body) == {
        "id", "status", "trace_id", "tool", "kind", "call_id", "input", "parent_id", "output", "error", "attempt",
        "max_attempts", "idempotency_key", "metadata", "approval", "created_at", "updated_at", "started_at",
        "finished_at", "deadline_at",
    }
    assert body["created_at"].endswith("Z")
    assert body["started_at"] is None


def test_cursor_round_trips_and_garbage_is_refused() -> None:
    assert cursors.decode("receipts", cursors.encode("receipts", ("rcpt_01abc",)), 1) == ("rcpt_01abc",)
    for garbage in ("!!!", "abc", "cmNwdA", "", "rcpt_01abc"):
        with pytest.raises(cursors.InvalidCursor):
            cursors.decode("receipts", garbage, 1)
