"""Webhook payloads written with a transition are the receipt as the API returns it, on both backends.

On PostgreSQL the payload is rendered inside the transition's statement; these tests hold that
rendering to ``Receipt.to_api()``.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import insert, select

from receipts.db import Database, utcnow
from receipts.schema.tables import webhook_endpoints, webhook_messages
from receipts.store.calls import Outcome, ReceiptStore, error
from tests.support.factories import OTHER_TENANT, TENANT, call, spec


def subscribe(db: Database, tenant_id: str, endpoint_id: str, event_types: str = "") -> None:
    now = utcnow()
    with db.transaction() as conn:
        conn.execute(insert(webhook_endpoints).values(
            id=endpoint_id, tenant_id=tenant_id, url="https://example.com/hook", description="",
            event_types=event_types, enabled=True, secrets=[], created_at=now, updated_at=now))


def messages(db: Database) -> list[dict[str, Any]]:
    with db.read() as conn:
        rows = conn.execute(select(webhook_messages).order_by(webhook_messages.c.created_at)).mappings().all()
    return [dict(row) for row in rows]


@pytest.fixture
def store(any_db: Database) -> ReceiptStore:
    return ReceiptStore(any_db)


def test_each_announced_transition_carries_the_receipt_as_the_api_shows_it(store: ReceiptStore) -> None:
    subscribe(store.db, TENANT, "ep_all")
    receipt, _ = store.create(call(spec("lookup"), arguments={"q": "a", "n": [1, 2]}, metadata={"run": 7},
                                   call_id="call_1", idempotency_key="k1", request_hash="h"))
    running = store.claim(receipt.id, lease_s=30, actor="w")
    assert running is not None
    done = store.finish(receipt.id, 1, Outcome("success", output={"answer": 42, "nested": {"ok": True}}), actor="w")
    assert done is not None
    sent = messages(store.db)
    assert [m["event_type"] for m in sent] == ["receipt.running", "receipt.succeeded"]
    assert sent[0]["payload"]["data"] == running.to_api()
    assert sent[1]["payload"]["data"] == done.to_api()
    assert sent[1]["payload"]["type"] == "receipt.succeeded"
    assert all(m["endpoint_id"] == "ep_all" and m["status"] == "pending" for m in sent)
    assert len({m["id"] for m in sent}) == 2 and all(m["id"].startswith("msg_") for m in sent)


def test_a_failure_payload_carries_the_error(store: ReceiptStore) -> None:
    subscribe(store.db, TENANT, "ep_failed", ",receipt.failed,")
    receipt, _ = store.create(call())
    store.claim(receipt.id, lease_s=30, actor="w")
    failed = store.finish(receipt.id, 1, Outcome("failed", error=error("tool_error", "nope")), actor="w")
    assert failed is not None
    [message] = messages(store.db)  # running is not among the endpoint's event types
    assert message["payload"]["data"] == failed.to_api()
    assert message["payload"]["data"]["error"]["code"] == "tool_error"


def test_no_messages_for_other_tenants_disabled_endpoints_or_unannounced_transitions(store: ReceiptStore) -> None:
    subscribe(store.db, OTHER_TENANT, "ep_other")
    receipt, _ = store.create(call())
    store.claim(receipt.id, lease_s=30, actor="w")
    store.retry_later(receipt.id, 1, error("upstream_error", "503", retryable=True), delay_s=1, published=True,
                      actor="w")
    assert messages(store.db) == []


def test_a_calls_own_webhook_url_gets_every_event(store: ReceiptStore) -> None:
    receipt, _ = store.create(call(webhook_url="https://example.com/mine"))
    store.claim(receipt.id, lease_s=30, actor="w")
    store.finish(receipt.id, 1, Outcome("success", output=None), actor="w")
    sent = messages(store.db)
    assert [(m["event_type"], m["url"], m["endpoint_id"]) for m in sent] == [
        ("receipt.running", "https://example.com/mine", None),
        ("receipt.succeeded", "https://example.com/mine", None),
    ]
    assert sent[1]["payload"]["data"]["output"] is None


def test_listeners_hear_how_many_messages_each_transition_queued(store: ReceiptStore) -> None:
    subscribe(store.db, TENANT, "ep_a")
    subscribe(store.db, TENANT, "ep_b", ",receipt.succeeded,")
    heard: list[tuple[str, int]] = []
    store.subscribe(lambda receipt, messages: heard.append((receipt.status, messages)))
    receipt, _ = store.create(call(webhook_url="https://example.com/mine"))
    store.claim(receipt.id, lease_s=30, actor="w")
    store.finish(receipt.id, 1, Outcome("success", output=None), actor="w")
    other, _ = store.create(call(tenant_id=OTHER_TENANT))
    store.claim(other.id, lease_s=30, actor="w")
    # pending announces nothing; running: ep_a + webhook_url; succeeded: ep_a, ep_b + webhook_url.
    assert heard == [("pending", 0), ("running", 2), ("success", 3), ("pending", 0), ("running", 0)]
    assert len(messages(store.db)) == 5
