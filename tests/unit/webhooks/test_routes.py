"""The webhook API on the real app (in process, PostgreSQL): shapes, validation, refusals, tenant isolation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gateway.app import create_app
from receipts import tenants
from receipts.catalogue import tools
from receipts.db import Database
from receipts.records import ToolSpec
from receipts.settings import Settings
from tests.support import services
from tests.support.factories import RecordingSender

ECHO = ToolSpec(name="echo", kind="python", description="Echo.", parameters={"type": "object"})
PROBLEM = "application/problem+json"


class Api:
    def __init__(self, client: TestClient, key: str, other_key: str) -> None:
        self.client = client
        self.headers = {"Authorization": f"Bearer {key}"}
        self.other = {"Authorization": f"Bearer {other_key}"}

    def __getattr__(self, method: str) -> Any:
        def send(path: str, *, other: bool = False, **kwargs: Any) -> Any:
            return self.client.request(method.upper(), path, headers=self.other if other else self.headers, **kwargs)
        return send


@contextmanager
def fresh_database() -> Iterator[Database]:
    """A database of its own (a test may run two apps side by side)."""
    url = services.create_database()
    db = Database(url, pool_size=2, name="toolrelay-test")
    try:
        yield db
    finally:
        db.dispose()
        services.drop_database(url)


def make_api(**settings: Any) -> Iterator[Api]:
    with fresh_database() as db:
        config = Settings(database_url=db.url, secret_key="route-tests", **settings)
        db.run(tools.publish([ECHO]))
        key, other = db.run(tenants.create_key("acme")), db.run(tenants.create_key("intruders"))
        with TestClient(create_app(config, db=db, sender=RecordingSender())) as client:
            yield Api(client, key, other)


@pytest.fixture
def api() -> Iterator[Api]:
    yield from make_api(outbound_allow_cidrs=["127.0.0.0/8"])


@pytest.fixture
def guarded_api() -> Iterator[Api]:
    """No allow-list: what an operator runs by default."""
    yield from make_api()


def assert_problem(response: Any, status: int, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert {"type", "title", "status", "detail"} <= set(body)
    if field is not None:
        assert any(e["field"] == field or e["field"].startswith(field + ".") for e in body["errors"]), body
    return body  # type: ignore[no-any-return]


def test_create_returns_the_endpoint_with_its_secret_once(api: Api) -> None:
    created = api.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/hook",
                                                      "event_types": ["receipt.failed", "receipt.succeeded"],
                                                      "description": "billing"})
    assert created.status_code == 201
    body = created.json()
    assert body["secret"].startswith("whsec_")
    assert body["event_types"] == ["receipt.failed", "receipt.succeeded"] and body["enabled"] is True
    assert created.headers["location"] == f"/v1/webhook-endpoints/{body['id']}"
    fetched = api.get(f"/v1/webhook-endpoints/{body['id']}").json()
    assert "secret" not in fetched and fetched["description"] == "billing"
    listed = api.get("/v1/webhook-endpoints").json()
    assert [e["id"] for e in listed["data"]] == [body["id"]] and "secret" not in listed["data"][0]
    assert listed["next_cursor"] is None


def test_update_and_delete(api: Api) -> None:
    endpoint = api.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/a"}).json()
    path = f"/v1/webhook-endpoints/{endpoint['id']}"
    changed = api.patch(path, json={"url": "http://127.0.0.1:9/b", "event_types": ["receipt.canceled"],
                                    "enabled": False}).json()
    assert changed["url"] == "http://127.0.0.1:9/b" and changed["event_types"] == ["receipt.canceled"]
    assert changed["enabled"] is False and changed["disabled_reason"] == "disabled by request"
    enabled = api.patch(path, json={"enabled": True}).json()
    assert enabled["enabled"] is True and enabled["disabled_reason"] is None
    assert api.patch(path, json={"event_types": []}).json()["event_types"] == []
    assert api.delete(path).status_code == 204
    assert_problem(api.get(path), 404)


def test_unknown_event_types_are_a_422_problem(api: Api) -> None:
    body = assert_problem(api.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/hook",
                                                                  "event_types": ["receipt.exploded"]}),
                          422, "event_types.0")
    assert "receipt.exploded" in body["errors"][0]["message"]
    endpoint = api.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/hook"}).json()
    assert_problem(api.patch(f"/v1/webhook-endpoints/{endpoint['id']}", json={"event_types": ["nope"]}),
                   422, "event_types.0")
    assert len(api.get("/v1/webhook-endpoints").json()["data"]) == 1


@pytest.mark.parametrize("url", ["not a url", "ftp://127.0.0.1/hook", "http://", "http:///path", "javascript:alert(1)",
                                 "http://no-such-host.invalid/hook", "http://127.0.0.1:99999/hook",
                                 # urlsplit raises ValueError on these (a 500 before the guard caught it)
                                 "http://[::1/hook", "http://127.0.0.1]/hook", "http://[not-an-address]/hook"])
def test_invalid_urls_are_refused(api: Api, url: str) -> None:
    assert_problem(api.post("/v1/webhook-endpoints", json={"url": url}), 422, "url")
    assert api.get("/v1/webhook-endpoints").json()["data"] == []


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/hook", "http://localhost/hook", "http://169.254.169.254/latest",
                                 "http://10.1.2.3/hook", "http://[::1]/hook", "http://0.0.0.0/hook"])
def test_non_public_addresses_are_refused_without_an_allow_list(guarded_api: Api, url: str) -> None:
    body = assert_problem(guarded_api.post("/v1/webhook-endpoints", json={"url": url}), 422, "url")
    assert "non-public" in body["detail"] or "refused" in body["errors"][0]["message"]


def test_the_allow_list_opens_loopback_but_not_metadata(api: Api) -> None:
    assert api.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:8080/hook"}).status_code == 201
    assert_problem(api.post("/v1/webhook-endpoints", json={"url": "http://169.254.169.254/latest"}), 422, "url")


def test_an_update_to_a_refused_url_changes_nothing(guarded_api: Api, api: Api) -> None:
    endpoint = api.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/a"}).json()
    assert_problem(api.patch(f"/v1/webhook-endpoints/{endpoint['id']}", json={"url": "http://169.254.169.254/"}),
                   422, "url")
    assert_problem(api.patch(f"/v1/webhook-endpoints/{endpoint['id']}", json={"url": None}), 422, "url")
    assert api.get(f"/v1/webhook-endpoints/{endpoint['id']}").json()["url"] == "http://127.0.0.1:9/a"


def test_rotate_returns_a_new_secret_and_when_the_old_one_expires(api: Api) -> None:
    endpoint = api.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/a"}).json()
    rotated = api.post(f"/v1/webhook-endpoints/{endpoint['id']}/rotate-secret")
    assert rotated.status_code == 200
    body = rotated.json()
    assert body["secret"].startswith("whsec_") and body["secret"] != endpoint["secret"]
    assert body["endpoint_id"] == endpoint["id"] and body["previous_secret_expires_at"].endswith("Z")


def test_another_tenants_endpoints_and_deliveries_are_not_found(api: Api) -> None:
    endpoint = api.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/a"}).json()
    path = f"/v1/webhook-endpoints/{endpoint['id']}"
    for response in (api.get(path, other=True), api.patch(path, other=True, json={"enabled": False}),
                     api.delete(path, other=True), api.post(f"{path}/rotate-secret", other=True),
                     api.get(f"{path}/deliveries", other=True),
                     api.post(f"{path}/recover", other=True, json={"since": "2020-01-01T00:00:00Z"})):
        assert_problem(response, 404)
    assert api.get("/v1/webhook-endpoints", other=True).json()["data"] == []
    assert api.get(path).json()["enabled"] is True


def test_deliveries_log_retry_and_recover_shapes(api: Api) -> None:
    endpoint = api.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/a"}).json()
    receipt = api.post("/v1/tool-calls", json={"tool": "echo", "arguments": {}}).json()
    canceled = api.post(f"/v1/receipts/{receipt['id']}/cancel")
    assert canceled.status_code == 200
    listed = api.get(f"/v1/webhook-endpoints/{endpoint['id']}/deliveries").json()
    assert len(listed["data"]) == 1
    delivery = listed["data"][0]
    assert delivery["event_type"] == "receipt.canceled" and delivery["receipt_id"] == receipt["id"]
    assert delivery["status"] in ("pending", "delivered", "failed") and delivery["endpoint_id"] == endpoint["id"]
    assert set(delivery) >= {"id", "attempts", "attempt_count", "next_attempt_at", "created_at"}
    assert api.get(f"/v1/deliveries/{delivery['id']}").json()["id"] == delivery["id"]
    assert api.get("/v1/deliveries", params={"receipt_id": receipt["id"]}).json()["data"][0]["id"] == delivery["id"]
    assert_problem(api.get(f"/v1/deliveries/{delivery['id']}", other=True), 404)
    assert_problem(api.post(f"/v1/deliveries/{delivery['id']}/retry", other=True), 404)
    retried = api.post(f"/v1/deliveries/{delivery['id']}/retry")
    assert retried.status_code == 202 and retried.json()["status"] == "pending"
    recovered = api.post(f"/v1/webhook-endpoints/{endpoint['id']}/recover", json={"since": "2020-01-01T00:00:00Z"})
    assert recovered.status_code == 202 and recovered.json() == {"recovered": 0}
    assert_problem(api.post(f"/v1/webhook-endpoints/{endpoint['id']}/recover", json={}), 422, "since")
    assert_problem(api.get(f"/v1/webhook-endpoints/{endpoint['id']}/deliveries", params={"status": "weird"}),
                   422, "status")
    api.patch(f"/v1/webhook-endpoints/{endpoint['id']}", json={"enabled": False})
    assert_problem(api.post(f"/v1/deliveries/{delivery['id']}/retry"), 409)


def test_deliveries_are_paginated_newest_first(api: Api) -> None:
    endpoint = api.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/a"}).json()
    for _ in range(5):
        receipt = api.post("/v1/tool-calls", json={"tool": "echo", "arguments": {}}).json()
        api.post(f"/v1/receipts/{receipt['id']}/cancel")
    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = api.get(f"/v1/webhook-endpoints/{endpoint['id']}/deliveries", params=params).json()
        seen += [d["created_at"] for d in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == 5 and seen == sorted(seen, reverse=True)


def every_page(api: Api, path: str, limit: int, **params: Any) -> list[list[str]]:
    """The ids of each page of ``path``, following ``next_cursor`` to the end."""
    pages: list[list[str]] = []
    cursor = None
    while True:
        response = api.get(path, params={"limit": limit, **params, **({"cursor": cursor} if cursor else {})})
        assert response.status_code == 200, response.text
        body = response.json()
        pages.append([item["id"] for item in body["data"]])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages
        assert len(pages) < 100, "next_cursor never ends"


def test_the_endpoint_list_pages_through_every_endpoint_once_in_order(api: Api) -> None:
    created = {api.post("/v1/webhook-endpoints", json={"url": f"http://127.0.0.1:9/{n}"}).json()["id"]
               for n in range(7)}
    whole = [e["id"] for e in api.get("/v1/webhook-endpoints", params={"limit": 200}).json()["data"]]
    assert set(whole) == created and whole == sorted(whole, reverse=True)  # newest first
    for limit in (1, 2, 3, 7):
        pages = every_page(api, "/v1/webhook-endpoints", limit)
        assert [len(page) for page in pages[:-1]] == [limit] * (len(pages) - 1)
        assert [i for page in pages for i in page] == whole, limit


def test_the_deliveries_lists_page_through_every_message_once_in_order(api: Api) -> None:
    # Two endpoints: each transition writes two messages in one statement, with the same created_at, so
    # page boundaries fall between messages that only their ids tell apart.
    first = api.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/a"}).json()
    api.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/b", "event_types": ["receipt.canceled"]})
    for _ in range(4):
        receipt = api.post("/v1/tool-calls", json={"tool": "echo", "arguments": {}}).json()
        assert api.post(f"/v1/receipts/{receipt['id']}/cancel").status_code == 200
    for path, count in (("/v1/deliveries", 8), (f"/v1/webhook-endpoints/{first['id']}/deliveries", 4)):
        listed = api.get(path, params={"limit": 200}).json()["data"]
        whole = [d["id"] for d in listed]
        assert len(set(whole)) == len(whole) == count
        stamps = [(d["created_at"], d["id"]) for d in listed]
        assert stamps == sorted(stamps, reverse=True)  # newest first, the id breaking ties
        for limit in (1, 3, count):
            pages = every_page(api, path, limit)
            assert [i for page in pages for i in page] == whole, (path, limit)


def test_a_cursor_from_another_list_is_a_422_naming_cursor(api: Api) -> None:
    endpoint = api.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/a"}).json()
    api.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/b"})
    for _ in range(2):
        receipt = api.post("/v1/tool-calls", json={"tool": "echo", "arguments": {}}).json()
        api.post(f"/v1/receipts/{receipt['id']}/cancel")
    deliveries_path = f"/v1/webhook-endpoints/{endpoint['id']}/deliveries"
    cursors = {path: api.get(path, params={"limit": 1}).json()["next_cursor"]
               for path in ("/v1/webhook-endpoints", "/v1/deliveries", "/v1/receipts")}
    assert all(cursors.values()), cursors
    refused = [("/v1/webhook-endpoints", cursors["/v1/deliveries"]),
               ("/v1/webhook-endpoints", cursors["/v1/receipts"]),
               ("/v1/deliveries", cursors["/v1/webhook-endpoints"]),
               ("/v1/deliveries", cursors["/v1/receipts"]),
               (deliveries_path, cursors["/v1/webhook-endpoints"]),
               ("/v1/receipts", cursors["/v1/deliveries"]),
               ("/v1/deliveries", "not-a-cursor")]
    for path, cursor in refused:
        body = assert_problem(api.get(path, params={"cursor": cursor}), 422, "cursor")
        assert [e["field"] for e in body["errors"]] == ["cursor"], (path, body)


def test_default_secret_create_rotate_and_show_without_the_secret(api: Api) -> None:
    assert api.get("/v1/webhook-secret").json() == {"configured": False, "secrets": []}
    assert_problem(api.post("/v1/webhook-secret/rotate"), 404)
    created = api.post("/v1/webhook-secret")
    assert created.status_code == 201 and created.json()["secret"].startswith("whsec_")
    assert_problem(api.post("/v1/webhook-secret"), 409)
    rotated = api.post("/v1/webhook-secret/rotate").json()
    assert rotated["secret"] != created.json()["secret"] and rotated["previous_secret_expires_at"]
    shown = api.get("/v1/webhook-secret").json()
    assert shown["configured"] is True and len(shown["secrets"]) == 2
    assert "whsec_" not in str(shown)
    assert api.get("/v1/webhook-secret", other=True).json()["configured"] is False


def test_a_calls_webhook_url_is_validated_before_anything_is_stored(api: Api) -> None:
    call = {"tool": "echo", "arguments": {}, "webhook_url": "http://127.0.0.1:9/hook"}
    body = assert_problem(api.post("/v1/tool-calls", json=call), 422, "webhook_url")
    assert "POST /v1/webhook-secret" in body["errors"][0]["message"]
    api.post("/v1/webhook-secret")
    for bad in ("ftp://127.0.0.1/x", "http://169.254.169.254/x", "nonsense", "http://[/x"):
        assert_problem(api.post("/v1/tool-calls", json={**call, "webhook_url": bad}), 422, "webhook_url")
    assert api.get("/v1/receipts").json()["data"] == []
    assert api.post("/v1/tool-calls", json=call).status_code in (200, 202)


def test_without_a_secret_key_endpoints_cannot_be_created() -> None:
    with fresh_database() as db:
        config = Settings(database_url=db.url, outbound_allow_cidrs=["127.0.0.0/8"])
        key = db.run(tenants.create_key("acme"))
        with TestClient(create_app(config, db=db, sender=RecordingSender())) as client:
            response = client.post("/v1/webhook-endpoints", json={"url": "http://127.0.0.1:9/a"},
                                   headers={"Authorization": f"Bearer {key}"})
    assert_problem(response, 503)
    assert "TOOLRELAY_SECRET_KEY" in response.json()["detail"]
