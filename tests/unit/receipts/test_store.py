"""The receipt store on SQLite and PostgreSQL: create-or-replay, CAS claim, fenced writes, cancel, queries."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from receipts import states
from receipts.db import Database, utcnow
from receipts.errors import IdempotencyMismatch, InvalidTransition, NotFound
from receipts.records import Receipt
from receipts.schema.tables import receipt_events, receipts
from receipts.store.calls import Outcome, ReceiptStore, decode_cursor, encode_cursor, error, fingerprint
from tests.support.factories import OTHER_TENANT, TENANT, call, spec


@pytest.fixture
def store(any_db: Database) -> ReceiptStore:
    return ReceiptStore(any_db)


def count_receipts(store: ReceiptStore) -> int:
    with store.db.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(receipts)).scalar_one())


def timeline(store: ReceiptStore, receipt_id: str) -> list[tuple[str | None, str, int, str]]:
    return [(e.from_status, e.to_status, e.attempt, e.actor) for e in store.events(TENANT, receipt_id)]


# -- create and idempotency --------------------------------------------------------------------


def test_create_stores_a_pending_receipt_with_the_tool_contract(store: ReceiptStore) -> None:
    tool = spec("send", effect="write", idempotent=False, timeout_s=7, max_attempts=2)
    before = utcnow()
    receipt, replayed = store.create(call(tool, arguments={"to": "x"}, deadline_s=60, trace_id="trace_a",
                                          call_id="call_1", metadata={"k": "v"}))
    assert not replayed
    assert receipt.id.startswith("rcpt_")
    assert receipt.status == "pending"
    assert receipt.attempt == 0
    assert (receipt.tool, receipt.kind, receipt.effect, receipt.idempotent) == ("send", "python", "write", False)
    assert (receipt.timeout_s, receipt.max_attempts, receipt.queue) == (7, 2, "tools")
    assert (receipt.trace_id, receipt.call_id, receipt.metadata) == ("trace_a", "call_1", {"k": "v"})
    assert receipt.input == {"to": "x"}
    assert receipt.output is None and receipt.error is None
    assert before <= receipt.created_at <= utcnow()
    assert receipt.deadline_at == receipt.created_at + timedelta(seconds=60)
    assert receipt.published_at == receipt.created_at  # the gateway publishes right after the commit
    assert store.get(TENANT, receipt.id) == receipt
    assert timeline(store, receipt.id) == [(None, "pending", 0, "api")]


def test_create_generates_a_trace_id_when_none_is_given(store: ReceiptStore) -> None:
    first, _ = store.create(call())
    second, _ = store.create(call())
    assert first.trace_id.startswith("trace_") and second.trace_id.startswith("trace_")
    assert first.trace_id != second.trace_id
    assert first.id != second.id


def test_duplicate_key_with_same_request_returns_same_receipt(store: ReceiptStore) -> None:
    request_hash = fingerprint({"tool": "echo", "arguments": {"x": 1}})
    first, replayed_first = store.create(call(idempotency_key="k1", request_hash=request_hash))
    again, replayed_again = store.create(call(idempotency_key="k1", request_hash=request_hash))
    assert (replayed_first, replayed_again) == (False, True)
    assert again == first
    assert count_receipts(store) == 1
    assert timeline(store, first.id) == [(None, "pending", 0, "api")]


def test_duplicate_key_with_different_request_is_a_mismatch(store: ReceiptStore) -> None:
    first, _ = store.create(call(idempotency_key="k1", request_hash=fingerprint({"arguments": {"x": 1}})))
    with pytest.raises(IdempotencyMismatch) as caught:
        store.create(call(arguments={"x": 2}, idempotency_key="k1", request_hash=fingerprint({"arguments": {"x": 2}})))
    assert caught.value.details["receipt_id"] == first.id
    assert count_receipts(store) == 1


def test_create_pending_on_an_event_loop_is_create(store: ReceiptStore) -> None:
    """The gateway's awaited create (on PostgreSQL, on the async pool) stores and replays as create does."""
    request_hash = fingerprint({"tool": "echo", "arguments": {"x": 1}})
    announced: list[tuple[str, int]] = []
    store.subscribe(lambda receipt, messages: announced.append((receipt.status, messages)))

    async def scenario() -> tuple[Receipt, bool, Receipt, bool, IdempotencyMismatch]:
        await store.db.open_async(2)
        try:
            assert store.db.async_ready == (store.db.dialect == "postgresql")
            first, replayed_first = await store.create_pending(call(idempotency_key="k1", request_hash=request_hash))
            again, replayed_again = await store.create_pending(call(idempotency_key="k1", request_hash=request_hash))
            with pytest.raises(IdempotencyMismatch) as caught:
                await store.create_pending(call(arguments={"x": 2}, idempotency_key="k1",
                                                request_hash=fingerprint({"arguments": {"x": 2}})))
            return first, replayed_first, again, replayed_again, caught.value
        finally:
            await store.db.close_async()

    first, replayed_first, again, replayed_again, mismatch = asyncio.run(scenario())
    assert (replayed_first, replayed_again) == (False, True)
    assert again == first == store.get(TENANT, first.id)
    assert (first.status, first.attempt, first.input, first.idempotency_key) == ("pending", 0, {"x": 1}, "k1")
    assert first.published_at == first.created_at
    assert mismatch.details["receipt_id"] == first.id
    assert count_receipts(store) == 1
    assert timeline(store, first.id) == [(None, "pending", 0, "api")]
    assert announced == [("pending", 0)]
    assert not store.db.async_ready


def test_idempotency_keys_are_scoped_to_the_tenant(store: ReceiptStore) -> None:
    request_hash = fingerprint({"x": 1})
    mine, _ = store.create(call(idempotency_key="k1", request_hash=request_hash))
    theirs, replayed = store.create(call(tenant_id=OTHER_TENANT, idempotency_key="k1", request_hash=request_hash))
    assert not replayed
    assert theirs.id != mine.id


def test_fingerprint_ignores_key_order() -> None:
    assert fingerprint({"a": 1, "b": {"c": 2, "d": 3}}) == fingerprint({"b": {"d": 3, "c": 2}, "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})


def test_concurrent_duplicates_under_one_key_create_exactly_one_receipt(store: ReceiptStore) -> None:
    threads = 16
    barrier = threading.Barrier(threads)
    request_hash = fingerprint({"x": 1})

    def submit(_: int) -> tuple[str, bool]:
        barrier.wait()
        receipt, replayed = store.create(call(idempotency_key="same", request_hash=request_hash))
        return receipt.id, replayed

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(submit, range(threads)))
    assert len({receipt_id for receipt_id, _ in results}) == 1
    assert sum(1 for _, replayed in results if not replayed) == 1
    assert count_receipts(store) == 1
    assert len(store.events(TENANT, results[0][0])) == 1


# -- claim, finish, retry ------------------------------------------------------------------------


def test_claim_is_compare_and_set(store: ReceiptStore) -> None:
    receipt, _ = store.create(call())
    claimed = store.claim(receipt.id, lease_s=30, actor="worker-a")
    assert claimed is not None
    assert claimed.status == "running"
    assert claimed.attempt == 1
    assert claimed.started_at is not None
    assert claimed.lease_expires_at == claimed.started_at + timedelta(seconds=30)
    assert store.claim(receipt.id, lease_s=30, actor="worker-b") is None
    assert store.get(TENANT, receipt.id).attempt == 1
    assert timeline(store, receipt.id)[-1] == ("pending", "running", 1, "worker-a")


def test_concurrent_claims_let_exactly_one_worker_win(store: ReceiptStore) -> None:
    receipt, _ = store.create(call())
    barrier = threading.Barrier(8)

    def claim(_: int) -> bool:
        barrier.wait()
        return store.claim(receipt.id, lease_s=30, actor="w") is not None

    with ThreadPoolExecutor(8) as pool:
        wins = list(pool.map(claim, range(8)))
    assert wins.count(True) == 1
    assert store.get(TENANT, receipt.id).attempt == 1


def test_claim_of_unknown_receipt_returns_none(store: ReceiptStore) -> None:
    assert store.claim("rcpt_nope", lease_s=30, actor="w") is None


def test_claim_waits_for_a_scheduled_retry_and_refuses_after_the_deadline(store: ReceiptStore) -> None:
    receipt, _ = store.create(call(deadline_s=60))
    assert store.claim(receipt.id, lease_s=30, actor="w", now=receipt.deadline_at) is None
    assert store.claim(receipt.id, lease_s=30, actor="w") is not None
    store.retry_later(receipt.id, 1, error("upstream_error", "503", retryable=True), delay_s=30, published=True,
                      actor="w")
    assert store.claim(receipt.id, lease_s=30, actor="w") is None  # early message: dropped
    due = utcnow() + timedelta(seconds=30)
    assert store.claim(receipt.id, lease_s=30, actor="w", now=due) is not None


def test_finish_records_the_outcome(store: ReceiptStore) -> None:
    receipt, _ = store.create(call())
    store.claim(receipt.id, lease_s=30, actor="w")
    done = store.finish(receipt.id, 1, Outcome("success", output={"y": [1, 2]}), actor="w")
    assert done is not None
    assert done.status == "success"
    assert done.output == {"y": [1, 2]}
    assert done.error is None
    assert done.finished_at is not None and done.lease_expires_at is None
    assert store.get(TENANT, receipt.id) == done


def test_finish_is_fenced_by_the_attempt(store: ReceiptStore) -> None:
    receipt, _ = store.create(call())
    store.claim(receipt.id, lease_s=30, actor="w")
    assert store.finish(receipt.id, 2, Outcome("success", output="stale"), actor="w") is None
    assert store.finish(receipt.id, 0, Outcome("success", output="stale"), actor="w") is None
    assert store.get(TENANT, receipt.id).status == "running"


def test_a_reclaimed_attempt_cannot_overwrite_the_next_one(store: ReceiptStore) -> None:
    receipt, _ = store.create(call())
    store.claim(receipt.id, lease_s=30, actor="slow-worker")
    # The lease ran out: the sweeper put it back, a second worker took attempt 2.
    store.retry_later(receipt.id, 1, error("internal", "lost", retryable=True), delay_s=0, published=False,
                      actor="sweeper")
    assert store.claim(receipt.id, lease_s=30, actor="fast-worker") is not None
    assert store.finish(receipt.id, 1, Outcome("success", output="from attempt 1"), actor="slow-worker") is None
    final = store.finish(receipt.id, 2, Outcome("success", output="from attempt 2"), actor="fast-worker")
    assert final is not None and final.output == "from attempt 2"


def test_retry_later_puts_the_receipt_back_with_its_error(store: ReceiptStore) -> None:
    receipt, _ = store.create(call())
    store.claim(receipt.id, lease_s=30, actor="w")
    err = error("upstream_error", "503 from upstream", retryable=True, retry_after_ms=2000)
    before = utcnow()
    again = store.retry_later(receipt.id, 1, err, delay_s=2.0, published=True, actor="w")
    assert again is not None
    assert again.status == "pending"
    assert again.attempt == 1
    assert again.error == err
    assert again.lease_expires_at is None
    assert before + timedelta(seconds=2) <= again.available_at <= utcnow() + timedelta(seconds=2)
    assert again.published_at == again.available_at
    assert store.retry_later(receipt.id, 1, err, delay_s=0, published=True, actor="w") is None  # not running
    assert timeline(store, receipt.id)[-1] == ("running", "pending", 1, "w")
    assert store.events(TENANT, receipt.id)[-1].detail == {"error": err, "retry_in_s": 2.0}


def test_retry_later_unpublished_leaves_the_message_to_the_sweeper(store: ReceiptStore) -> None:
    receipt, _ = store.create(call())
    store.claim(receipt.id, lease_s=30, actor="w")
    again = store.retry_later(receipt.id, 1, error("timeout", "slow", retryable=True), delay_s=120,
                              published=False, actor="w")
    assert again is not None and again.published_at is None


def test_retry_later_is_fenced_by_the_attempt(store: ReceiptStore) -> None:
    receipt, _ = store.create(call())
    store.claim(receipt.id, lease_s=30, actor="w")
    assert store.retry_later(receipt.id, 3, error("timeout", "slow"), delay_s=0, published=True, actor="w") is None
    assert store.get(TENANT, receipt.id).status == "running"


# -- cancel ------------------------------------------------------------------------------------------


def test_cancel_pending_prevents_the_claim(store: ReceiptStore) -> None:
    receipt, _ = store.create(call())
    canceled = store.cancel(TENANT, receipt.id)
    assert canceled.status == "canceled"
    assert canceled.error is not None and canceled.error["code"] == "canceled"
    assert canceled.finished_at is not None
    assert store.claim(receipt.id, lease_s=30, actor="w") is None


def test_cancel_running_discards_the_workers_result(store: ReceiptStore) -> None:
    receipt, _ = store.create(call())
    store.claim(receipt.id, lease_s=30, actor="w")
    assert store.cancel(TENANT, receipt.id, actor="api").status == "canceled"
    assert store.finish(receipt.id, 1, Outcome("success", output="late"), actor="w") is None
    assert store.retry_later(receipt.id, 1, error("timeout", "t"), delay_s=0, published=True, actor="w") is None
    final = store.get(TENANT, receipt.id)
    assert final.status == "canceled"
    assert final.output is None
    assert timeline(store, receipt.id) == [
        (None, "pending", 0, "api"), ("pending", "running", 1, "w"), ("running", "canceled", 1, "api")
    ]


def test_cancel_of_a_terminal_receipt_is_an_invalid_transition(store: ReceiptStore) -> None:
    receipt, _ = store.create(call())
    store.claim(receipt.id, lease_s=30, actor="w")
    store.finish(receipt.id, 1, Outcome("success", output=1), actor="w")
    with pytest.raises(InvalidTransition):
        store.cancel(TENANT, receipt.id)
    assert store.get(TENANT, receipt.id).status == "success"


def test_cancel_of_another_tenants_receipt_is_not_found(store: ReceiptStore) -> None:
    receipt, _ = store.create(call())
    with pytest.raises(NotFound):
        store.cancel(OTHER_TENANT, receipt.id)
    assert store.get(TENANT, receipt.id).status == "pending"


def test_waiting_receipt_completes_once(store: ReceiptStore) -> None:
    receipt, _ = store.create(call(spec("ask", kind="function")), status=states.WAITING)
    assert receipt.status == "waiting"
    done = store.complete_waiting(TENANT, receipt.id, Outcome("success", output={"answer": 42}), actor="client")
    assert done.status == "success" and done.output == {"answer": 42}
    with pytest.raises(InvalidTransition):
        store.complete_waiting(TENANT, receipt.id, Outcome("success", output={"answer": 0}), actor="client")
    assert store.get(TENANT, receipt.id).output == {"answer": 42}


# -- reading ---------------------------------------------------------------------------------------


def test_get_hides_other_tenants_and_unknown_ids_alike(store: ReceiptStore) -> None:
    receipt, _ = store.create(call())
    with pytest.raises(NotFound):
        store.get(OTHER_TENANT, receipt.id)
    with pytest.raises(NotFound):
        store.get(TENANT, "rcpt_unknown")
    with pytest.raises(NotFound):
        store.events(OTHER_TENANT, receipt.id)
    assert store.load(receipt.id) == receipt
    assert store.load("rcpt_unknown") is None


def newest_first(*ids: str) -> list[str]:
    """Listing order: by id, descending (ids sort by creation time, to the millisecond)."""
    return sorted(ids, reverse=True)


def test_list_filters_by_trace_status_and_tool(store: ReceiptStore) -> None:
    a, _ = store.create(call(spec("echo"), trace_id="trace_1"))
    b, _ = store.create(call(spec("sleep"), trace_id="trace_1"))
    c, _ = store.create(call(spec("echo"), trace_id="trace_2"))
    store.create(call(spec("echo"), tenant_id=OTHER_TENANT, trace_id="trace_1"))
    store.claim(b.id, lease_s=30, actor="w")

    def ids(**filters: str) -> list[str]:
        return [r.id for r in store.list(TENANT, **filters).items]

    assert ids() == newest_first(c.id, b.id, a.id)  # newest first, only this tenant's
    assert ids(trace_id="trace_1") == newest_first(b.id, a.id)
    assert ids(status="running") == [b.id]
    assert ids(status="pending") == newest_first(c.id, a.id)
    assert ids(tool="echo") == newest_first(c.id, a.id)
    assert ids(trace_id="trace_1", tool="echo") == [a.id]
    assert ids(trace_id="trace_none") == []


def test_list_pages_through_everything_with_the_cursor(store: ReceiptStore) -> None:
    created = [store.create(call(arguments={"n": n}))[0].id for n in range(8)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = store.list(TENANT, limit=3, cursor=cursor)
        pages += 1
        assert len(page.items) <= 3
        seen += [r.id for r in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert pages == 3
    assert seen == sorted(created, reverse=True)


def test_list_of_exactly_one_full_page_has_no_next_cursor(store: ReceiptStore) -> None:
    for n in range(3):
        store.create(call(arguments={"n": n}))
    page = store.list(TENANT, limit=3)
    assert len(page.items) == 3
    assert page.next_cursor is None


def test_events_are_the_timeline_oldest_first(store: ReceiptStore) -> None:
    receipt, _ = store.create(call())
    store.claim(receipt.id, lease_s=30, actor="w1")
    err = error("upstream_error", "503", retryable=True)
    store.retry_later(receipt.id, 1, err, delay_s=0, published=True, actor="w1")
    store.claim(receipt.id, lease_s=30, actor="w2")
    store.finish(receipt.id, 2, Outcome("failed", error=error("tool_error", "no")), actor="w2")
    events = store.events(TENANT, receipt.id)
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


def test_every_transition_is_logged_in_the_same_transaction(store: ReceiptStore) -> None:
    receipt, _ = store.create(call())
    store.claim(receipt.id, lease_s=30, actor="w")
    store.finish(receipt.id, 1, Outcome("success", output=1), actor="w")
    with store.db.engine.connect() as conn:
        rows = conn.execute(select(receipt_events.c.to_status).where(receipt_events.c.receipt_id == receipt.id))
        assert [row.to_status for row in rows] == ["pending", "running", "success"]


def test_listeners_hear_every_committed_transition(store: ReceiptStore) -> None:
    heard: list[tuple[str, str]] = []
    store.subscribe(lambda r, _messages: heard.append((r.id, r.status)))
    receipt, _ = store.create(call())
    store.claim(receipt.id, lease_s=30, actor="w")
    store.finish(receipt.id, 1, Outcome("success", output=1), actor="w")
    assert store.finish(receipt.id, 1, Outcome("success", output=1), actor="w") is None
    assert heard == [(receipt.id, "pending"), (receipt.id, "running"), (receipt.id, "success")]


def test_receipt_to_api_has_the_documented_shape(store: ReceiptStore) -> None:
    receipt, _ = store.create(call())
    body = receipt.to_api()
    assert set(body) == {
        "id", "status", "trace_id", "tool", "kind", "call_id", "input", "parent_id", "output", "error", "attempt",
        "max_attempts", "idempotency_key", "metadata", "created_at", "updated_at", "started_at", "finished_at",
        "deadline_at",
    }
    assert body["created_at"].endswith("Z")
    assert body["started_at"] is None


def test_cursor_round_trips_and_garbage_is_refused() -> None:
    assert decode_cursor(encode_cursor("rcpt_01abc")) == "rcpt_01abc"
    for garbage in ("!!!", "abc", "cmNwdA", "", "rcpt_01abc"):
        with pytest.raises(ValueError):
            decode_cursor(garbage)
