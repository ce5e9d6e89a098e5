"""Integration tools on the real deployment: stored setups, each provider, and their failures."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from receipts import tenants
from receipts.catalogue.setups import IntegrationSetups
from receipts.secretbox import SecretBox
from tests.integration.kinds.conftest import define, run
from tests.support.smtp import Mailbox, smtp_server
from tests.support.stack import Stack, free_port
from tests.support.upstreams import Reply, Upstream

MAIL = {"to": "ann@example.com", "subject": "Report", "text": "All good."}


def enable(client: httpx.Client, name: str, provider: str, method: str, **extra: Any) -> dict[str, Any]:
    return define(client, {"kind": "integration", "name": name, "provider": provider, "method": method, **extra})


def put_setup(client: httpx.Client, provider: str, setup: dict[str, Any]) -> dict[str, Any]:
    response = client.put(f"/v1/integrations/{provider}/setup", json=setup)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_providers_are_published_by_the_worker(stack: Stack) -> None:
    with stack.client() as client:
        listed = {p["provider"]: p for p in client.get("/v1/integrations").json()["data"]}
    assert set(listed) == {"email", "wikipedia", "weather", "mcp", "http"}
    assert listed["email"]["secret_fields"] == ["password"]


def test_wikipedia_weather_and_http_against_local_fakes(stack: Stack, upstream: Upstream) -> None:
    upstream.route("/article", Reply(body="An article.", headers={"Content-Type": "text/plain"}))
    with stack.client() as client:
        enable(client, "wiki_search", "wikipedia", "search", arguments={"limit": 2})
        enable(client, "weather_now", "weather", "current")
        enable(client, "weather_week", "weather", "forecast")
        enable(client, "fetch_page", "http", "fetch")
        wiki = run(stack, client, "wiki_search", {"query": "Turing"})
        now = run(stack, client, "weather_now", {"latitude": 52.5, "longitude": 13.4})
        week = run(stack, client, "weather_week", {"latitude": 52.5, "longitude": 13.4, "days": 2})
        page = run(stack, client, "fetch_page", {"url": upstream.url("/article")})
        private = run(stack, client, "fetch_page", {"url": "http://169.254.169.254/latest/"})
    assert wiki["status"] == "success", wiki
    assert [r["title"] for r in wiki["output"]["results"]] == ["Turing (topic 1)", "Turing (topic 2)"]
    assert now["status"] == "success" and now["output"]["current"]["temperature_2m"] == 21.5
    assert week["status"] == "success" and len(week["output"]["days"]) == 2
    assert page["status"] == "success" and page["output"]["text"] == "An article."
    assert private["status"] == "failed" and private["error"]["code"] == "forbidden"


def test_email_with_a_stored_setup_over_starttls(stack: Stack) -> None:
    with smtp_server("starttls", user="bot", password="pw-123") as server, stack.client() as client:
        shown = put_setup(client, "email", {"host": "127.0.0.1", "port": server.port, "security": "starttls",
                                            "verify_tls": False, "username": "bot", "password": "pw-123",
                                            "from_address": "bot@example.com"})
        assert "pw-123" not in str(shown) and "password" in shown["fields_set"]
        enable(client, "send_report", "email", "send")
        receipt = run(stack, client, "send_report", MAIL)
        assert receipt["status"] == "success", receipt
        [(sender, recipients, message)] = server.mailbox.messages
        assert (sender, recipients) == ("bot@example.com", ["ann@example.com"])
        assert message["Message-ID"] == f"<{receipt['id']}@toolrelay>" and server.mailbox.logins == ["bot"]


def test_an_smtp_server_that_refuses(stack: Stack) -> None:
    with smtp_server(mailbox=Mailbox(refuse_rcpt=True)) as server, stack.client() as client:
        put_setup(client, "email", {"host": "127.0.0.1", "port": server.port, "security": "none",
                                    "from_address": "bot@example.com"})
        enable(client, "send_refused", "email", "send")
        receipt = run(stack, client, "send_refused", MAIL)
    assert receipt["status"] == "failed" and receipt["attempt"] == 1, receipt
    assert receipt["error"]["code"] == "upstream_error" and receipt["error"]["retryable"] is False
    assert server.mailbox.messages == []


def test_missing_or_invalid_stored_setup_fails_naming_the_field(stack: Stack) -> None:
    with smtp_server() as server, stack.client(stack.other_key) as client:
        enable(client, "send_nosetup", "email", "send")
        missing = run(stack, client, "send_nosetup", MAIL, key=stack.other_key)
        assert missing["status"] == "failed" and missing["error"]["code"] == "invalid_arguments", missing
        assert missing["error"]["details"]["field"] == "host" and "'host'" in missing["error"]["message"]
        tenant = stack.db.run(tenants.for_key(stack.other_key))
        assert tenant is not None
        stack.db.run(IntegrationSetups(SecretBox(stack.env["TOOLRELAY_SECRET_KEY"])).put(
            tenant.id, "email", {"host": "127.0.0.1", "port": "not-a-port", "from_address": "x@example.com"}))
        invalid = run(stack, client, "send_nosetup", MAIL, key=stack.other_key)
        assert invalid["error"]["code"] == "invalid_arguments" and invalid["error"]["details"]["field"] == "port"
        assert "stored setup" in invalid["error"]["message"]
        assert client.delete("/v1/integrations/email/setup").status_code == 204
        assert server.mailbox.messages == []


@pytest.mark.parametrize("where", ["setup", "definition"])
def test_mcp_list_and_call_with_the_url_from_setup_or_definition(stack: Stack, mcp_url: str, where: str) -> None:
    with stack.client() as client:
        fixed = {"arguments": {"url": mcp_url}} if where == "definition" else {}
        if where == "setup":
            put_setup(client, "mcp", {"url": mcp_url, "headers": {"Authorization": "Bearer x"}})
        enable(client, f"mcp_list_{where}", "mcp", "list_tools", **fixed)
        enable(client, f"mcp_call_{where}", "mcp", "call_tool", **fixed)
        listed = run(stack, client, f"mcp_list_{where}")
        shouted = run(stack, client, f"mcp_call_{where}", {"tool": "shout", "arguments": {"text": "hi"}})
        failed = run(stack, client, f"mcp_call_{where}", {"tool": "explode", "arguments": {"reason": "test"}})
    assert listed["status"] == "success", listed
    assert {t["name"] for t in listed["output"]["tools"]} == {"add", "shout", "explode"}
    assert shouted["status"] == "success" and shouted["output"]["content"][0]["text"] == "HI"
    assert failed["status"] == "failed" and failed["error"]["code"] == "tool_error"
    assert "exploded" in str(failed["error"]["details"]) or "explode" in failed["error"]["message"]


def test_an_mcp_server_that_is_down_or_broken(stack: Stack, upstream: Upstream) -> None:
    upstream.route("/broken-mcp", Reply(500, body="internal error"))
    # The other tenant: it stored no mcp setup, whose url would win over the definitions' (merge order).
    with stack.client(stack.other_key) as client:
        enable(client, "mcp_down", "mcp", "call_tool", arguments={"url": f"http://127.0.0.1:{free_port()}/mcp"})
        enable(client, "mcp_broken", "mcp", "list_tools", arguments={"url": upstream.url("/broken-mcp")},
               max_attempts=1)
        down = run(stack, client, "mcp_down", {"tool": "add", "arguments": {"a": 1, "b": 2}}, key=stack.other_key)
        broken = run(stack, client, "mcp_broken", key=stack.other_key)
    assert down["status"] == "failed" and down["error"]["code"] == "upstream_error", down
    assert "cannot reach" in down["error"]["message"] and down["attempt"] == 1
    assert broken["status"] == "failed" and broken["error"]["code"] == "upstream_error", broken
    assert upstream.requests_to("/broken-mcp")
