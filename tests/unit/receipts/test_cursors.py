"""Keyset pagination: a cursor belongs to one list, garbage is refused, and a page starts where the last ended."""

from __future__ import annotations

import base64
import json

import pytest

from receipts import cursors
from receipts.db import Database
from receipts.errors import InvalidInput
from receipts.records import Page
from receipts.store import calls
from receipts.webhooks import endpoints
from tests.support import sql
from tests.support.factories import TENANT, call


def raw_cursor(value: object) -> str:
    """A cursor made by hand, the way cursors are made: URL-safe base64 of JSON, unpadded."""
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def add_endpoints(db: Database, count: int) -> None:
    for n in range(count):
        sql.execute(db, "INSERT INTO webhook_endpoints (id, tenant_id, url, description, event_types, enabled, "
                        "secrets, created_at, updated_at) VALUES (%(id)s, %(tenant)s, 'https://example.com/hook', "
                        "'', '', true, '[]'::jsonb, now(), now())", id=f"ep_{n:02d}", tenant=TENANT)


def add_receipts(db: Database, count: int) -> list[str]:
    """``count`` receipts of the tenant; their ids, newest first (the order of the list)."""
    created = [db.run(calls.create(call(arguments={"n": n})))[0].id for n in range(count)]
    return sorted(created, reverse=True)


def receipts_page(db: Database, limit: int, cursor: str | None = None) -> Page:
    return db.run(calls.list_receipts(TENANT, limit=limit, cursor=cursor))


def test_the_second_page_continues_exactly_after_the_first(db: Database) -> None:
    every = add_receipts(db, 7)
    first = receipts_page(db, 3)
    assert [r.id for r in first.items] == every[:3]
    assert first.next_cursor is not None
    second = receipts_page(db, 3, first.next_cursor)
    assert [r.id for r in second.items] == every[3:6]
    third = receipts_page(db, 3, second.next_cursor)
    assert [r.id for r in third.items] == every[6:]
    assert third.next_cursor is None


def test_receipts_added_after_the_first_page_do_not_shift_the_next_one(db: Database) -> None:
    every = add_receipts(db, 4)
    first = receipts_page(db, 2)
    add_receipts(db, 3)  # newer: they belong before the first page, not in the second
    second = receipts_page(db, 2, first.next_cursor)
    assert [r.id for r in second.items] == every[2:]
    assert second.next_cursor is None


def test_a_cursor_of_one_list_is_refused_by_another(db: Database) -> None:
    add_receipts(db, 3)
    add_endpoints(db, 3)
    receipts_cursor = receipts_page(db, 1).next_cursor
    endpoints_cursor = db.run(endpoints.list_endpoints(TENANT, limit=1)).next_cursor
    assert receipts_cursor is not None and endpoints_cursor is not None
    with pytest.raises(cursors.InvalidCursor):
        receipts_page(db, 1, endpoints_cursor)
    with pytest.raises(cursors.InvalidCursor):
        db.run(endpoints.list_endpoints(TENANT, limit=1, cursor=receipts_cursor))
    with pytest.raises(cursors.InvalidCursor):
        db.run(endpoints.deliveries(TENANT, cursor=receipts_cursor))
    # each is still good for its own list
    assert len(receipts_page(db, 1, receipts_cursor).items) == 1
    assert len(db.run(endpoints.list_endpoints(TENANT, limit=1, cursor=endpoints_cursor)).items) == 1


GARBAGE = [
    "", "!!!", "abc", "cmNwdA", "rcpt_01abc", "a" * 500,
    raw_cursor({"kind": "receipts", "id": "rcpt_01abc"}),  # JSON, but not an array
    raw_cursor(["receipts"]),  # no position
    raw_cursor(["receipts", "rcpt_01abc", "rcpt_01abd"]),  # a position of another width
    raw_cursor(["receipts", None]),
    raw_cursor(["receipts", True]),
    raw_cursor(["receipts", ["rcpt_01abc"]]),
    raw_cursor(["webhook-endpoints", "rcpt_01abc"]),  # another list's
]


@pytest.mark.parametrize("garbage", GARBAGE)
def test_garbage_is_refused_as_invalid_input_naming_the_cursor(db: Database, garbage: str) -> None:
    with pytest.raises(cursors.InvalidCursor) as caught:
        receipts_page(db, 10, garbage)
    assert isinstance(caught.value, InvalidInput)  # a 422 at the API
    assert caught.value.errors == [{"field": "cursor", "message": "not a cursor from next_cursor"}]


def test_a_cursor_round_trips_its_position() -> None:
    cursor = cursors.encode("deliveries", ("2026-12-01T09:00:00.000000Z", "msg_1"))
    assert "=" not in cursor
    assert cursors.decode("deliveries", cursor, 2) == ("2026-12-01T09:00:00.000000Z", "msg_1")
    assert cursors.check("deliveries", None, 2) is None
    assert cursors.decode("receipts", raw_cursor(["receipts", "rcpt_01abc"]), 1) == ("rcpt_01abc",)
