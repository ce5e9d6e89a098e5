"""Each built-in provider against a real local server: wikipedia, weather, http, email (aiosmtpd), mcp."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from receipts.db import Database
from receipts.records import Receipt
from tests.support.mcp_server import mcp_server
from tests.support.smtp import Mailbox, smtp_server
from tests.support.stack import free_port
from tests.support.upstreams import Flood, Reply, Upstream, mediawiki, open_meteo, serving
from tests.unit.kinds.conftest import Worker, make_settings
from workers.integrations import builtin_providers


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with serving() as running:
        running.route("/w/api.php", mediawiki).route("/v1/forecast", open_meteo)
        yield running


@pytest.fixture
def worker(db: Database, upstream: Upstream) -> Worker:
    return Worker(db, make_settings(db, wikipedia_base_url=upstream.url("/w/api.php"),
                                    weather_base_url=upstream.url("/v1/forecast")))


def enable(worker: Worker, name: str, provider: str, method: str, **arguments: Any) -> None:
    worker.define({"kind": "integration", "name": name, "provider": provider, "method": method,
                   "arguments": arguments})


def assert_output_matches_schema(receipt: Receipt, provider: str, method: str) -> None:
    declared = builtin_providers()[provider].method(method)
    assert declared is not None
    errors = list(Draft202012Validator(declared.output).iter_errors(receipt.output))
    assert not errors, errors


def test_wikipedia_search(worker: Worker, upstream: Upstream) -> None:
    enable(worker, "wiki", "wikipedia", "search")
    receipt = worker.run("wiki", {"query": "Ada Lovelace", "limit": 2})
    assert receipt.status == "success", receipt.error
    assert_output_matches_schema(receipt, "wikipedia", "search")
    first = receipt.output["results"][0]
    assert first["title"] == "Ada Lovelace (topic 1)" and first["snippet"] == "The Ada Lovelace article number 1"
    assert first["url"] == f"http://127.0.0.1:{upstream.port}/wiki/Ada_Lovelace_%28topic_1%29"
    assert len(receipt.output["results"]) == 2
    [seen] = upstream.requests_to("/w/api.php")
    assert seen.query["srsearch"] == ["Ada Lovelace"] and seen.query["srlimit"] == ["2"]


def test_wikipedia_error_answers_fail_without_retry(worker: Worker, upstream: Upstream) -> None:
    upstream.route("/w/api.php", Reply(json={"error": {"code": "badquery", "info": "bad"}}))
    enable(worker, "wiki", "wikipedia", "search")
    receipt = worker.run("wiki", {"query": "x"})
    assert (receipt.status, receipt.error["code"], receipt.error["retryable"]) == ("failed", "upstream_error", False)


def test_weather_current_and_forecast(worker: Worker, upstream: Upstream) -> None:
    enable(worker, "weather_now", "weather", "current")
    enable(worker, "weather_week", "weather", "forecast", temperature_unit="fahrenheit")
    worker.put_setup(worker.tenant, "weather", {"api_key": "om-key"})
    now = worker.run("weather_now", {"latitude": 48.85, "longitude": 2.35})
    assert now.status == "success", now.error
    assert_output_matches_schema(now, "weather", "current")
    assert now.output["current"]["temperature_2m"] == 21.5 and now.output["units"]["temperature_2m"] == "°C"
    week = worker.run("weather_week", {"latitude": 48.85, "longitude": 2.35, "days": 3})
    assert week.status == "success", week.error
    assert [day["date"] for day in week.output["days"]] == ["2024-06-01", "2024-06-02", "2024-06-03"]
    assert week.output["days"][1]["temperature_2m_max"] == 11.0 and week.output["units"]["temperature_2m_max"] == "°F"
    forecast_request = upstream.requests_to("/v1/forecast")[-1]
    assert forecast_request.query["apikey"] == ["om-key"] and forecast_request.query["forecast_days"] == ["3"]


def test_weather_upstream_500_is_retried(worker: Worker, upstream: Upstream) -> None:
    upstream.route("/v1/forecast", Reply(500, body="down"), open_meteo)
    enable(worker, "weather_now", "weather", "current")
    receipt = worker.run("weather_now", {"latitude": 1, "longitude": 2})
    assert receipt.status == "pending" and receipt.error["code"] == "upstream_error"
    assert worker.execute(receipt.id).status == "success"


def test_http_fetch_text_capped_and_guarded(worker: Worker, upstream: Upstream) -> None:
    upstream.route("/page", Reply(body="<p>hello</p>", headers={"Content-Type": "text/html; charset=utf-8"}))
    upstream.route("/huge", Flood(50 * 1024 * 1024))
    upstream.route("/image", Reply(body=b"\x89PNG", headers={"Content-Type": "image/png"}))
    upstream.route("/to-metadata", Reply(301, headers={"Location": "http://169.254.169.254/"}))
    enable(worker, "fetch", "http", "fetch")
    page = worker.run("fetch", {"url": upstream.url("/page")})
    assert page.status == "success", page.error
    assert_output_matches_schema(page, "http", "fetch")
    assert (page.output["text"], page.output["content_type"], page.output["truncated"]) == (
        "<p>hello</p>", "text/html", False)
    huge = worker.run("fetch", {"url": upstream.url("/huge"), "max_bytes": 1000})
    assert huge.status == "success" and huge.output["truncated"] is True and len(huge.output["text"]) == 1000
    image = worker.run("fetch", {"url": upstream.url("/image")})
    assert (image.status, image.error["code"]) == ("failed", "tool_error")
    for url in (upstream.url("/to-metadata"), "http://10.0.0.1/", "http://[::1]:9/"):
        refused = worker.run("fetch", {"url": url})
        assert (refused.status, refused.error["code"]) == ("failed", "forbidden"), url


SMTP_USER, SMTP_PASSWORD = "ann", "s3cret-pw"


def smtp_setup(port: int, security: str, **extra: Any) -> dict[str, Any]:
    return {"host": "127.0.0.1", "port": port, "security": security, "verify_tls": False,
            "from_address": "bot@example.com", **extra}


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")  # implicit TLS: it is TLS
@pytest.mark.parametrize("security", ["none", "starttls", "ssl"])
def test_email_is_sent_over_plain_starttls_and_ssl(worker: Worker, security: str) -> None:
    login = {} if security == "none" else {"username": SMTP_USER, "password": SMTP_PASSWORD}
    with smtp_server(security, **({"user": SMTP_USER, "password": SMTP_PASSWORD} if login else {})) as server:
        worker.put_setup(worker.tenant, "email", smtp_setup(server.port, security, **login))
        enable(worker, "mail", "email", "send")
        receipt = worker.run("mail", {"to": ["ann@example.com", "bob@example.com"], "subject": "Hi",
                                      "text": "Hello there", "html": "<b>Hello</b>"})
        assert receipt.status == "success", receipt.error
        assert_output_matches_schema(receipt, "email", "send")
        assert receipt.output["message_id"] == f"<{receipt.id}@toolrelay>"
        [(sender, recipients, message)] = server.mailbox.messages
        assert sender == "bot@example.com" and recipients == ["ann@example.com", "bob@example.com"]
        assert message["Subject"] == "Hi" and message["Message-ID"] == f"<{receipt.id}@toolrelay>"
        assert server.mailbox.logins == ([SMTP_USER] if login else [])


def test_an_smtp_server_that_refuses_fails_the_call_for_good(worker: Worker) -> None:
    with smtp_server(mailbox=Mailbox(refuse_rcpt=True)) as server:
        worker.put_setup(worker.tenant, "email", smtp_setup(server.port, "none"))
        enable(worker, "mail", "email", "send")
        receipt = worker.run("mail", {"to": "nobody@example.com", "subject": "s", "text": "t"})
        assert receipt.status == "failed" and receipt.error["code"] == "upstream_error"
        assert receipt.error["retryable"] is False
        assert receipt.error["details"]["refused"]["nobody@example.com"][0] == 550
        assert server.mailbox.messages == []


def test_smtp_failures_that_may_pass_are_retryable_but_a_send_is_not_repeated(worker: Worker) -> None:
    enable(worker, "mail", "email", "send")
    with smtp_server(mailbox=Mailbox(temporary=True)) as server:
        worker.put_setup(worker.tenant, "email", smtp_setup(server.port, "none"))
        busy = worker.run("mail", {"to": "a@example.com", "subject": "s", "text": "t"})
    assert busy.error["retryable"] is True and busy.status == "failed"  # a write: not retried
    assert "not_retried" in busy.error["details"]
    with smtp_server("starttls", user=SMTP_USER, password=SMTP_PASSWORD) as server:
        worker.put_setup(worker.tenant, "email", smtp_setup(server.port, "starttls", username=SMTP_USER,
                                                            password="wrong"))
        denied = worker.run("mail", {"to": "a@example.com", "subject": "s", "text": "t"})
    assert denied.error["code"] == "upstream_error" and denied.error["retryable"] is False
    assert "login" in denied.error["message"]
    worker.put_setup(worker.tenant, "email", smtp_setup(free_port(), "none"))
    down = worker.run("mail", {"to": "a@example.com", "subject": "s", "text": "t"})
    assert down.error["code"] == "upstream_error" and "cannot talk" in down.error["message"]


@pytest.fixture
def mcp_url() -> Iterator[str]:
    with mcp_server() as url:
        yield url


def test_mcp_list_and_call_tools(worker: Worker, mcp_url: str) -> None:
    worker.put_setup(worker.tenant, "mcp", {"url": mcp_url, "headers": {"Authorization": "Bearer m"}})
    enable(worker, "mcp_tools", "mcp", "list_tools")
    enable(worker, "mcp_call", "mcp", "call_tool")
    listed = worker.run("mcp_tools")
    assert listed.status == "success", listed.error
    assert {tool["name"] for tool in listed.output["tools"]} == {"add", "shout", "explode"}
    added = worker.run("mcp_call", {"tool": "add", "arguments": {"a": 2, "b": 3}})
    assert added.status == "success", added.error
    assert added.output["structured_content"] == {"result": 5} and added.output["content"][0]["text"] == "5"


def test_mcp_requests_carry_the_trace_context_of_the_call(worker: Worker) -> None:
    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    seen: list[dict[str, str]] = []
    with mcp_server(seen) as url:
        enable(worker, "mcp_traced", "mcp", "call_tool", url=url)
        added = worker.run("mcp_traced", {"tool": "add", "arguments": {"a": 1, "b": 1}}, traceparent=caller)
    assert added.status == "success", added.error
    assert seen and {headers.get("traceparent") for headers in seen} == {caller}  # every request of the session


def test_mcp_tool_errors_and_unknown_tools_fail_the_call(worker: Worker, mcp_url: str) -> None:
    enable(worker, "mcp_call", "mcp", "call_tool", url=mcp_url)  # the URL fixed in the tool definition
    exploded = worker.run("mcp_call", {"tool": "explode", "arguments": {"reason": "r"}})
    assert exploded.status == "failed" and exploded.error["code"] == "tool_error"
    assert "explode" in exploded.error["message"] and exploded.error["details"]["content"]
    unknown = worker.run("mcp_call", {"tool": "nope"})
    assert unknown.status == "failed" and "nope" in unknown.error["message"]


def test_mcp_server_down_or_answering_500(worker: Worker, upstream: Upstream) -> None:
    enable(worker, "mcp_down", "mcp", "list_tools", url=f"http://127.0.0.1:{free_port()}/mcp")
    down = worker.run("mcp_down")
    assert down.status == "pending"  # list_tools is a read: retried later
    assert down.error["code"] == "upstream_error" and "cannot reach" in down.error["message"]
    upstream.route("/mcp", Reply(500, body="internal error"))
    enable(worker, "mcp_broken", "mcp", "list_tools", url=upstream.url("/mcp"))
    broken = worker.run("mcp_broken")
    assert broken.error["code"] == "upstream_error" and broken.status in ("pending", "failed")
    assert upstream.requests_to("/mcp")


def test_mcp_server_url_is_guarded(db: Database, mcp_url: str) -> None:
    worker = Worker(db, make_settings(db))
    worker.put_setup(worker.tenant, "mcp", {"url": mcp_url})
    enable(worker, "mcp_tools", "mcp", "list_tools")
    strict = Worker(db, make_settings(db, outbound_allow_cidrs=[]))
    receipt = strict.run("mcp_tools")
    assert (receipt.status, receipt.error["code"]) == ("failed", "forbidden")
