"""Reading receipts over HTTP: get, long-poll, list with filters and cursor, timeline, cancel, isolation."""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Any

import pytest

from receipts.store import calls
from receipts.store.calls import Result
from tests.unit.gateway.conftest import Gateway, assert_problem


def create(gateway: Gateway, tool: str = "echo", key: str | None = None, **fields: object) -> dict[str, object]:
    response = gateway.post_call({"tool": tool, "arguments": fields.pop("arguments", {"x": 1}), **fields}, key=key)
    assert response.status_code == 202, response.text
    return response.json()  # type: ignore[no-any-return]


def test_get_returns_the_receipt(gateway: Gateway) -> None:
    created = create(gateway)
    response = gateway.client.get(f"/v1/receipts/{created['id']}", headers=gateway.headers())
    assert response.status_code == 200
    assert response.json() == created


def test_unknown_receipt_is_a_404_problem(gateway: Gateway) -> None:
    body = assert_problem(gateway.client.get("/v1/receipts/rcpt_nope", headers=gateway.headers()), 404)
    assert "rcpt_nope" in body["detail"]


def test_another_tenants_receipt_is_a_404_like_an_unknown_one(gateway: Gateway) -> None:
    theirs = create(gateway, key=gateway.other_key)
    rid = theirs["id"]
    for response in (
        gateway.client.get(f"/v1/receipts/{rid}", headers=gateway.headers()),
        gateway.client.get(f"/v1/receipts/{rid}", params={"wait_s": 1}, headers=gateway.headers()),
        gateway.client.get(f"/v1/receipts/{rid}/events", headers=gateway.headers()),
        gateway.client.post(f"/v1/receipts/{rid}/cancel", headers=gateway.headers()),
    ):
        assert_problem(response, 404)
    listed = gateway.client.get("/v1/receipts", headers=gateway.headers()).json()
    assert listed["data"] == []
    theirs_now = gateway.db.run(calls.get(_tenant_of(gateway, str(rid)), str(rid)))
    assert theirs_now.status == "pending"  # cancel was refused


def _tenant_of(gateway: Gateway, receipt_id: str) -> str:
    receipt = gateway.db.run(calls.load(receipt_id))
    assert receipt is not None
    return receipt.tenant_id


def test_long_poll_returns_as_soon_as_the_receipt_settles(gateway: Gateway) -> None:
    created = create(gateway)
    gateway.finish_soon(str(created["id"]), 0.5)
    started = time.monotonic()
    response = gateway.client.get(f"/v1/receipts/{created['id']}", params={"wait_s": 60}, headers=gateway.headers())
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    assert response.json()["status"] == "success"
    assert response.json()["output"] == {"x": 1}
    assert elapsed < 30  # answered once it settled, not at the end of the 60 s wait


def test_long_poll_gives_up_after_wait_s_with_the_current_state(gateway: Gateway) -> None:
    created = create(gateway)
    started = time.monotonic()
    response = gateway.client.get(f"/v1/receipts/{created['id']}", params={"wait_s": 1}, headers=gateway.headers())
    assert response.status_code == 200
    assert response.json()["status"] == "pending"
    assert 1 <= time.monotonic() - started < 10  # held for its 1 s, and not much longer


def test_long_poll_on_a_terminal_receipt_answers_at_once(gateway: Gateway) -> None:
    created = create(gateway)
    gateway.finish_soon(str(created["id"]), 0).join(10)
    started = time.monotonic()
    response = gateway.client.get(f"/v1/receipts/{created['id']}", params={"wait_s": 60}, headers=gateway.headers())
    assert response.json()["status"] == "success"
    assert time.monotonic() - started < 10  # not held for the 60 s it could wait


@pytest.mark.parametrize("wait_s", ["61", "-1", "soon"])
def test_wait_s_out_of_range_is_a_422(gateway: Gateway, wait_s: str) -> None:
    created = create(gateway)
    assert_problem(gateway.client.get(f"/v1/receipts/{created['id']}", params={"wait_s": wait_s},
                                      headers=gateway.headers()), 422)


def newest_first(*ids: object) -> list[object]:
    """Listing order: by id, descending (ids sort by creation time, to the millisecond)."""
    return sorted(ids, reverse=True)  # type: ignore[type-var]


def test_list_filters_by_trace_status_and_tool(gateway: Gateway) -> None:
    a = create(gateway, "echo", trace_id="trace_1")
    b = create(gateway, "add", arguments={"a": 1, "b": 2}, trace_id="trace_1")
    c = create(gateway, "echo", trace_id="trace_2")
    gateway.finish_soon(str(b["id"]), 0).join(10)

    def ids(**params: str) -> list[object]:
        response = gateway.client.get("/v1/receipts", params=params, headers=gateway.headers())
        assert response.status_code == 200
        return [r["id"] for r in response.json()["data"]]

    assert ids() == newest_first(c["id"], b["id"], a["id"])
    assert ids(trace_id="trace_1") == newest_first(b["id"], a["id"])
    assert ids(status="success") == [b["id"]]
    assert ids(status="pending", tool="echo") == newest_first(c["id"], a["id"])
    assert ids(tool="add") == [b["id"]]


def test_list_pages_with_the_cursor(gateway: Gateway) -> None:
    created = [str(create(gateway, arguments={"n": n})["id"]) for n in range(7)]
    seen: list[str] = []
    params: dict[str, str | int] = {"limit": 3}
    pages = 0
    while True:
        body = gateway.client.get("/v1/receipts", params=params, headers=gateway.headers()).json()
        pages += 1
        seen += [r["id"] for r in body["data"]]
        if body["next_cursor"] is None:
            break
        params = {"limit": 3, "cursor": body["next_cursor"]}
    assert pages == 3
    assert seen == sorted(created, reverse=True)


def list_page(gateway: Gateway, path: str = "/v1/receipts", **params: str | int) -> dict[str, Any]:
    response = gateway.client.get(path, params=params, headers=gateway.headers())
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_every_receipt_is_on_exactly_one_page_newest_first_while_calls_arrive(gateway: Gateway) -> None:
    created = [str(create(gateway, trace_id="trace_paged", arguments={"n": n})["id"]) for n in range(5)]
    create(gateway, trace_id="trace_elsewhere")
    first = list_page(gateway, trace_id="trace_paged", limit=2)
    # A call accepted after the first page is newer than every receipt on it: the pages that follow,
    # which continue strictly after the first page's last receipt, neither show it nor shift.
    arrived = str(create(gateway, trace_id="trace_paged")["id"])
    pages = [first]
    while pages[-1]["next_cursor"] is not None:
        pages.append(list_page(gateway, trace_id="trace_paged", limit=2, cursor=pages[-1]["next_cursor"]))
    seen = [receipt["id"] for page in pages for receipt in page["data"]]
    assert [len(page["data"]) for page in pages] == [2, 2, 1]
    assert seen == sorted(created, reverse=True)  # each once, newest first, only the filtered trace
    assert arrived not in seen
    assert [r["id"] for r in list_page(gateway, trace_id="trace_paged", limit=2)["data"]][0] == arrived
    # A list that ends exactly at a page's end says so on that page: no empty page follows.
    second = list_page(gateway, trace_id="trace_paged", limit=3, cursor=list_page(
        gateway, trace_id="trace_paged", limit=3)["next_cursor"])
    assert len(second["data"]) == 3 and second["next_cursor"] is None


def forged(*parts: object) -> str:
    """A cursor as the API encodes one (URL-safe base64 of a JSON array), with any parts."""
    return base64.urlsafe_b64encode(json.dumps(parts).encode()).decode().rstrip("=")


def test_a_cursor_from_another_list_or_garbage_is_a_422_naming_the_cursor(gateway: Gateway) -> None:
    for n in range(2):
        response = gateway.client.post("/v1/webhook-endpoints", json={"url": f"https://93.184.215.14/hook/{n}"},
                                       headers=gateway.headers())
        assert response.status_code == 201, response.text
    endpoints_cursor = list_page(gateway, "/v1/webhook-endpoints", limit=1)["next_cursor"]
    assert endpoints_cursor is not None
    assert len(list_page(gateway, "/v1/webhook-endpoints", limit=1, cursor=endpoints_cursor)["data"]) == 1
    for _ in range(2):
        create(gateway)
    receipts_cursor = list_page(gateway, limit=1)["next_cursor"]
    assert len(list_page(gateway, limit=1, cursor=receipts_cursor)["data"]) == 1

    for cursor in (endpoints_cursor, "!!!", "abc", "cmNwdA", receipts_cursor + "x", forged("receipts"),
                   forged("receipts", "rcpt_a", "rcpt_b"), forged("receipts", 7), forged("receipts", None),
                   forged("receipts", "rcpt_\u0000"), forged({"receipts": "rcpt_a"})):
        response = gateway.client.get("/v1/receipts", params={"cursor": cursor}, headers=gateway.headers())
        body = assert_problem(response, 422)
        assert [error["field"] for error in body["errors"]] == ["cursor"], (cursor, body)
    response = gateway.client.get("/v1/webhook-endpoints", params={"cursor": receipts_cursor},
                                  headers=gateway.headers())
    assert [error["field"] for error in assert_problem(response, 422)["errors"]] == ["cursor"]


@pytest.mark.parametrize("params", [{"status": "done"}, {"cursor": "!!!"}, {"cursor": "abc"}, {"cursor": "cmNwdA"},
                                    {"limit": 0}, {"limit": 201}])
def test_bad_list_parameters_are_422(gateway: Gateway, params: dict[str, str | int]) -> None:
    assert_problem(gateway.client.get("/v1/receipts", params=params, headers=gateway.headers()), 422)


def test_events_are_the_timeline(gateway: Gateway) -> None:
    created = create(gateway)
    gateway.finish_soon(str(created["id"]), 0).join(10)
    body = gateway.client.get(f"/v1/receipts/{created['id']}/events", headers=gateway.headers()).json()
    assert [(e["from_status"], e["to_status"], e["attempt"], e["actor"]) for e in body["data"]] == [
        (None, "pending", 0, "api"), ("pending", "running", 1, "test-worker"), ("running", "success", 1, "test-worker")
    ]
    assert body["next_cursor"] is None


def test_cancel_pending_then_again_is_a_409(gateway: Gateway) -> None:
    created = create(gateway)
    response = gateway.client.post(f"/v1/receipts/{created['id']}/cancel", headers=gateway.headers())
    assert response.status_code == 200
    assert response.json()["status"] == "canceled"
    assert response.json()["error"]["code"] == "canceled"
    assert_problem(gateway.client.post(f"/v1/receipts/{created['id']}/cancel", headers=gateway.headers()), 409)


def test_cancel_running_discards_the_late_result(gateway: Gateway) -> None:
    created = create(gateway)
    lease = gateway.db.run(calls.claim(str(created["id"]), lease_s=30, actor="w"))
    assert lease is not None
    claimed = lease.receipt
    assert gateway.client.post(f"/v1/receipts/{created['id']}/cancel", headers=gateway.headers()).status_code == 200
    assert gateway.db.run(calls.finish(claimed.id, claimed.attempt, Result("success", output=1), actor="w")) is None
    final = gateway.client.get(f"/v1/receipts/{created['id']}", headers=gateway.headers()).json()
    assert final["status"] == "canceled" and final["output"] is None


def test_cancel_wakes_a_long_poll(gateway: Gateway) -> None:
    created = create(gateway)

    def cancel_later() -> None:
        time.sleep(0.5)
        gateway.db.run(calls.cancel(gateway.tenant_id, str(created["id"])))

    threading.Thread(target=cancel_later, daemon=True).start()
    response = gateway.client.get(f"/v1/receipts/{created['id']}", params={"wait_s": 30}, headers=gateway.headers())
    assert response.json()["status"] == "canceled"


def test_tools_are_listed_natively_and_in_vendor_formats(gateway: Gateway) -> None:
    native = gateway.client.get("/v1/tools", headers=gateway.headers())
    assert native.status_code == 200
    tools = {t["name"]: t for t in native.json()["data"]}
    assert {"echo", "add", "charge"} <= set(tools)
    assert tools["charge"]["effect"] == "write" and tools["charge"]["idempotent"] is False
    assert tools["add"]["parameters"]["required"] == ["a", "b"]

    openai = gateway.client.get("/v1/tools", params={"format": "openai"}, headers=gateway.headers()).json()
    add = next(t for t in openai if t["function"]["name"] == "add")
    assert add["type"] == "function"
    assert add["function"]["parameters"] == tools["add"]["parameters"]
    assert add["function"]["description"] == "Add two integers."

    anthropic = gateway.client.get("/v1/tools", params={"format": "anthropic"}, headers=gateway.headers()).json()
    add = next(t for t in anthropic if t["name"] == "add")
    assert add["input_schema"] == tools["add"]["parameters"]

    assert_problem(gateway.client.get("/v1/tools", params={"format": "xml"}, headers=gateway.headers()), 422)
    assert_problem(gateway.client.get("/v1/tools"), 401)


def test_one_tool_and_an_unknown_one(gateway: Gateway) -> None:
    response = gateway.client.get("/v1/tools/add", headers=gateway.headers())
    assert response.status_code == 200 and response.json()["name"] == "add"
    assert_problem(gateway.client.get("/v1/tools/nope", headers=gateway.headers()), 404)


def test_health_readiness_and_openapi(gateway: Gateway) -> None:
    assert gateway.client.get("/healthz").json() == {"status": "ok"}
    ready = gateway.client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "broker": "ok"}
    spec = gateway.client.get("/openapi.json").json()
    assert {"/v1/tool-calls", "/v1/receipts/{receipt_id}", "/v1/receipts", "/v1/tools"} <= set(spec["paths"])
    assert gateway.client.get("/docs").status_code == 200


def test_readiness_fails_when_the_broker_is_unreachable(gateway: Gateway) -> None:
    class Unreachable:
        def __enter__(self) -> Unreachable:
            raise ConnectionRefusedError("no broker")

        def __exit__(self, *_: object) -> None:
            return None

    gateway.sender.connection_for_write = Unreachable  # type: ignore[attr-defined]
    response = gateway.client.get("/readyz")
    body = assert_problem(response, 503)
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["broker"].startswith("error")


def test_unknown_path_is_a_404_problem(gateway: Gateway) -> None:
    assert_problem(gateway.client.get("/v1/nothing-here", headers=gateway.headers()), 404)
