"""Webhook payloads written with a transition are the receipt as the API returns it.

The payload is rendered inside the transition's statement; these tests hold that rendering to
``Receipt.to_api()``.
"""

from __future__ import annotations

from typing import Any

from receipts.db import Announce, Database
from receipts.records import Receipt
from receipts.store import calls
from receipts.store.calls import NewCall, Result, error
from tests.support import sql
from tests.support.factories import OTHER_TENANT, TENANT, call, spec

MESSAGE_COLUMNS = ("id", "tenant_id", "endpoint_id", "url", "event_type", "receipt_id", "payload", "status")


def subscribe(db: Database, tenant_id: str, endpoint_id: str, event_types: str = "", *, enabled: bool = True) -> None:
    sql.execute(db, "INSERT INTO webhook_endpoints (id, tenant_id, url, description, event_types, enabled, secrets, "
                    "created_at, updated_at) VALUES (%(id)s, %(tenant_id)s, 'https://example.com/hook', '', "
                    "%(event_types)s, %(enabled)s, '[]'::jsonb, now(), now())",
                id=endpoint_id, tenant_id=tenant_id, event_types=event_types, enabled=enabled)


def messages(db: Database) -> list[dict[str, Any]]:
    rows = sql.rows(db, f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM webhook_messages ORDER BY created_at, id")
    return [dict(zip(MESSAGE_COLUMNS, row, strict=True)) for row in rows]


def create(db: Database, new_call: NewCall) -> Receipt:
    receipt, _ = db.run(calls.create(new_call))
    return receipt


def claim(db: Database, receipt_id: str) -> Receipt | None:
    lease = db.run(calls.claim(receipt_id, lease_s=30, actor="w"))
    return None if lease is None else lease.receipt


def finish(db: Database, receipt_id: str, result: Result) -> Receipt | None:
    return db.run(calls.finish(receipt_id, 1, result, actor="w"))


def test_each_announced_transition_carries_the_receipt_as_the_api_shows_it(db: Database) -> None:
    subscribe(db, TENANT, "ep_all")
    receipt = create(db, call(spec("lookup"), arguments={"q": "a", "n": [1, 2]}, metadata={"run": 7},
                                   call_id="call_1", idempotency_key="k1", request_hash="h"))
    running = claim(db, receipt.id)
    assert running is not None
    done = finish(db, receipt.id, Result("success", output={"answer": 42, "nested": {"ok": True}}))
    assert done is not None
    sent = messages(db)
    assert [m["event_type"] for m in sent] == ["receipt.running", "receipt.succeeded"]
    assert sent[0]["payload"]["data"] == running.to_api()
    assert sent[1]["payload"]["data"] == done.to_api()
    assert sent[1]["payload"]["type"] == "receipt.succeeded"
    assert all(m["endpoint_id"] == "ep_all" and m["status"] == "pending" for m in sent)
    assert len({m["id"] for m in sent}) == 2 and all(m["id"].startswith("msg_") for m in sent)


def test_a_failure_payload_carries_the_error(db: Database) -> None:
    subscribe(db, TENANT, "ep_failed", ",receipt.failed,")
    receipt = create(db, call())
    claim(db, receipt.id)
    failed = finish(db, receipt.id, Result("failed", error=error("tool_error", "nope")))
    assert failed is not None
    [message] = messages(db)  # running is not among the endpoint's event types
    assert message["payload"]["data"] == failed.to_api()
    assert message["payload"]["data"]["error"]["code"] == "tool_error"


def test_no_messages_for_other_tenants_disabled_endpoints_or_unannounced_transitions(db: Database) -> None:
    subscribe(db, OTHER_TENANT, "ep_other")
    subscribe(db, TENANT, "ep_disabled", enabled=False)
    receipt = create(db, call())
    claim(db, receipt.id)
    db.run(calls.retry_later(receipt.id, 1, error("upstream_error", "503", retryable=True), delay_s=1,
                             published=True, actor="w"))
    assert messages(db) == []


def test_a_calls_own_webhook_url_gets_every_event(db: Database) -> None:
    receipt = create(db, call(webhook_url="https://example.com/mine"))
    claim(db, receipt.id)
    finish(db, receipt.id, Result("success", output=None))
    sent = messages(db)
    assert [(m["event_type"], m["url"], m["endpoint_id"]) for m in sent] == [
        ("receipt.running", "https://example.com/mine", None),
        ("receipt.succeeded", "https://example.com/mine", None),
    ]
    assert sent[1]["payload"]["data"]["output"] is None


def test_listeners_hear_how_many_messages_each_transition_queued(db: Database) -> None:
    subscribe(db, TENANT, "ep_a")
    subscribe(db, TENANT, "ep_b", ",receipt.succeeded,")
    heard: list[tuple[str, int]] = []

    def listener(item: Announce) -> None:
        heard.append((item.subject.status, item.messages))

    db.subscribe(listener)
    receipt = create(db, call(webhook_url="https://example.com/mine"))
    claim(db, receipt.id)
    finish(db, receipt.id, Result("success", output=None))
    other = create(db, call(tenant_id=OTHER_TENANT))
    claim(db, other.id)
    # pending announces nothing; running: ep_a + webhook_url; succeeded: ep_a, ep_b + webhook_url.
    assert heard == [("pending", 0), ("running", 2), ("success", 3), ("pending", 0), ("running", 0)]
    assert len(messages(db)) == 5
