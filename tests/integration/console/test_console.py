"""The console as a user drives it: the key, the receipts, a failed call's timeline, webhooks, the catalogue."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.integration.console.conftest import Scenario, sign_in
from tests.support.browser import screenshot

pytestmark = pytest.mark.integration


def test_the_key_typed_once_shows_the_receipts(page: Page, scenario: Scenario) -> None:
    sign_in(page, scenario)
    rows = page.locator("[data-receipt-id]")
    expect(rows).to_have_count(3)
    for receipt in (scenario.succeeded, scenario.failed, scenario.retried):
        expect(page.locator(f"[data-receipt-id={receipt['id']}]")).to_contain_text(receipt["tool"])
    expect(page.locator(f"[data-receipt-id={scenario.failed['id']}]")).to_contain_text("invalid_arguments")
    screenshot(page, "receipts")
    page.reload()  # the key is kept for the tab's session: no second typing
    expect(rows).to_have_count(3)
    expect(page.locator("input[name=api_key]")).to_be_hidden()


def test_a_failed_call_is_two_clicks_from_the_first_page(page: Page, scenario: Scenario) -> None:
    failed = scenario.failed
    events = scenario.get(f"/v1/receipts/{failed['id']}/events")["data"]
    deliveries = scenario.deliveries(receipt_id=failed["id"])
    sign_in(page, scenario)
    expect(page.locator("[data-receipt-id]")).to_have_count(3)

    page.locator("[data-quick=failed]").click()
    expect(page.locator("[data-receipt-id]")).to_have_count(1)
    page.locator(f"[data-receipt-id={failed['id']}]").click()

    timeline = page.locator("[data-testid=timeline]")
    expect(timeline).to_be_visible()
    markers = timeline.locator("[data-event]")
    expect(markers).to_have_count(len(events))
    assert [markers.nth(i).get_attribute("data-event") for i in range(len(events))] == \
        [event["to_status"] for event in events] == ["pending", "running", "failed"]
    expect(timeline.locator("[data-attempt]")).to_have_count(1)
    expect(page.locator("[data-testid=receipt-error]")).to_contain_text("invalid_arguments: division by zero")

    assert len(deliveries) == 2  # receipt.running and receipt.failed
    expect(timeline.locator("[data-delivery]")).to_have_count(2)
    for delivery in deliveries:
        row = page.locator(f"[data-delivery-id={delivery['id']}]")
        expect(row).to_contain_text(delivery["event_type"])
        expect(row).to_contain_text(str(delivery["attempts"][-1]["status_code"]))
    screenshot(page, "receipt-failed")


def test_a_retried_call_shows_each_attempt_and_the_backoff_between(page: Page, scenario: Scenario) -> None:
    retried = scenario.retried
    events = scenario.get(f"/v1/receipts/{retried['id']}/events")["data"]
    assert [event["to_status"] for event in events] == ["pending", "running", "pending", "running", "success"]
    sign_in(page, scenario)
    page.locator(f"[data-receipt-id={retried['id']}]").click()
    timeline = page.locator("[data-testid=timeline]")
    expect(timeline.locator("[data-event]")).to_have_count(len(events))
    attempts = timeline.locator("[data-attempt]")
    expect(attempts).to_have_count(2)
    assert [attempts.nth(i).get_attribute("data-outcome") for i in range(2)] == ["retry", "success"]
    expect(timeline.locator(".backoff")).to_have_count(1)
    expect(timeline.locator("[data-delivery]")).to_have_count(3)
    screenshot(page, "receipt-retried")


def clear(page: Page) -> None:
    """Clear the filters and wait for the unfiltered list (the filter form is drawn anew)."""
    page.locator("[data-testid=receipt-filters] a.reset").click()
    expect(page).to_have_url(re.compile(r"#/receipts$"))
    expect(page.locator("[data-receipt-id]")).to_have_count(3)


def test_filters_narrow_the_receipts_by_tool_trace_and_time(page: Page, scenario: Scenario) -> None:
    sign_in(page, scenario)
    rows = page.locator("[data-receipt-id]")
    expect(rows).to_have_count(3)
    form = page.locator("[data-testid=receipt-filters]")
    form.locator("input[name=tool]").fill("flaky")
    form.locator("button[type=submit]").click()
    expect(rows).to_have_count(1)
    expect(page.locator(f"[data-receipt-id={scenario.retried['id']}]")).to_be_visible()

    clear(page)
    form.locator("input[name=trace_id]").fill(scenario.failed["trace_id"])
    form.locator("button[type=submit]").click()
    expect(rows).to_have_count(1)
    expect(page.locator(f"[data-receipt-id={scenario.failed['id']}]")).to_be_visible()

    clear(page)
    form.locator("input[name=before]").fill("2000-01-01T00:00:00")
    form.locator("button[type=submit]").click()
    expect(page.get_by_text("No receipts match these filters.")).to_be_visible()
    expect(page.get_by_text("3 newer than the window not shown.")).to_be_visible()

    clear(page)
    form.locator("input[name=after]").fill("2000-01-01T00:00:00")
    form.locator("button[type=submit]").click()
    expect(rows).to_have_count(3)


def test_a_delivery_is_retried_from_its_endpoint_page(page: Page, scenario: Scenario) -> None:
    endpoint = scenario.endpoint
    delivery = next(d for d in scenario.deliveries(receipt_id=scenario.failed["id"])
                    if d["event_type"] == "receipt.failed")
    before = len([r for r in scenario.receiver.requests if r.webhook_id == delivery["id"]])
    sign_in(page, scenario)
    page.locator("[data-nav=webhooks]").click()
    expect(page.locator(f"[data-endpoint-id={endpoint['id']}]")).to_contain_text(endpoint["url"])
    screenshot(page, "webhooks")

    page.locator(f"[data-endpoint-id={endpoint['id']}]").click()
    rows = page.locator("[data-delivery-id]")
    expect(rows).to_have_count(7)
    row = page.locator(f"[data-delivery-id={delivery['id']}]")
    expect(row.locator("ol.attempts li")).to_have_count(len(delivery["attempts"]))
    row.locator("[data-action=retry]").click()
    expect(page.locator("[data-testid=notice]")).to_contain_text(f"Retry of {delivery['id']} queued")

    deadline = time.monotonic() + 20
    while len(scenario.get(f"/v1/deliveries/{delivery['id']}")["attempts"]) <= len(delivery["attempts"]):
        assert time.monotonic() < deadline, "the retried delivery was not sent again"
        time.sleep(0.2)
    sent = [r for r in scenario.receiver.requests if r.webhook_id == delivery["id"]]
    assert len(sent) == before + 1 and sent[-1].verified_by == (0,)  # same webhook-id, signed again
    page.reload()
    expect(row.locator("ol.attempts li")).to_have_count(len(delivery["attempts"]) + 1)
    screenshot(page, "deliveries")


def test_the_catalogue_shows_each_tool_with_its_contract(page: Page, scenario: Scenario) -> None:
    tools = scenario.get("/v1/tools")["data"]
    sign_in(page, scenario)
    page.locator("[data-nav=tools]").click()
    expect(page.locator("[data-tool]")).to_have_count(len(tools))
    for name in ("echo", "sleep", "calculate"):
        expect(page.locator(f"[data-tool={name}]")).to_be_visible()
    write = page.locator("[data-tool=flaky_write]")
    expect(write.locator("td").nth(2)).to_have_text("write")
    expect(write.locator("td").nth(3)).to_have_text("no")
    calculate = page.locator("[data-tool=calculate]")
    calculate.locator("summary").click()
    expect(calculate.locator("pre.json")).to_contain_text('"expression"')
    screenshot(page, "catalogue")


def test_a_refused_key_sends_the_user_back_to_the_key_field(page: Page, scenario: Scenario) -> None:
    sign_in(page, scenario, key="trk_not-a-key")
    problem = page.locator("#gate [data-testid=problem]")
    expect(problem).to_have_attribute("data-status", "401")
    expect(problem).to_contain_text("invalid API key")
    expect(page.locator("input[name=api_key]")).to_be_focused()
    assert page.evaluate("sessionStorage.length") == 0
    page.locator("input[name=api_key]").fill(scenario.stack.api_key)
    page.locator("input[name=api_key]").press("Enter")
    expect(page.locator("[data-receipt-id]")).to_have_count(3)


def test_console_files_need_no_key_and_the_api_still_does(scenario: Scenario) -> None:
    base = scenario.stack.base_url
    index = httpx.get(f"{base}/console/")
    assert index.status_code == 200 and 'name="api_key"' in index.text
    assert "default-src 'self'" in index.headers["content-security-policy"]
    script = httpx.get(f"{base}/console/js/app.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert httpx.get(f"{base}/console", follow_redirects=False).headers["location"] == "/console/"
    assert httpx.get(f"{base}/console/../gateway/app.py").status_code == 404
    assert httpx.get(f"{base}/console/%2e%2e/routes.py").status_code == 404
    assert httpx.get(f"{base}/v1/receipts").status_code == 401
    assert not [path for path in scenario.get("/openapi.json")["paths"] if path.startswith("/console")]
