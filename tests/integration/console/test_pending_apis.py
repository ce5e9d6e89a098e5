"""The approvals and runs pages on a gateway that does not have those APIs yet.

What can be checked before they exist: the approvals page with nothing waiting, its buttons on a
receipt that waits for a decision, and that a 404 from the API (approve, reject, runs) is shown
to the user as a problem rather than as a broken page. Once the approvals and runs APIs land, these
tests become end-to-end ones on real approvals and runs.
"""

from __future__ import annotations

import json
import uuid

import pytest
from playwright.sync_api import Page, Route, expect

from receipts.tenants import Tenants
from tests.integration.console.conftest import Scenario, sign_in
from tests.support.browser import screenshot

pytestmark = pytest.mark.integration


def test_the_approvals_page_says_when_nothing_waits(page: Page, scenario: Scenario) -> None:
    sign_in(page, scenario)
    page.locator("[data-nav=approvals]").click()
    expect(page.locator("[data-testid=approvals-empty]")).to_have_text("No calls are waiting for approval.")
    screenshot(page, "approvals")


def test_a_decision_the_server_cannot_take_is_shown_as_its_problem(page: Page, scenario: Scenario) -> None:
    # A tenant of its own with a client-run (function) tool: its call really waits. The gateway does
    # not mark it as waiting for approval yet, so the browser is given the receipt as the approvals
    # API will list it (its "approval" added); the decisions themselves go to the real gateway.
    key = Tenants(scenario.stack.db).create_key(f"approvals-{uuid.uuid4().hex[:8]}")
    with scenario.stack.client(key) as client:
        defined = client.post("/v1/tools", json={"kind": "function", "name": "refund", "description": "Refund.",
                                                 "parameters": {"type": "object"}})
        assert defined.status_code == 201, defined.text
        waiting = client.post("/v1/tool-calls", json={"tool": "refund", "arguments": {}}).json()
    assert waiting["status"] == "waiting"

    def as_requested(route: Route) -> None:
        response = route.fetch()
        body = response.json()
        for receipt in body.get("data", [body]):
            receipt["approval"] = {"state": "requested"}
        route.fulfill(response=response, body=json.dumps(body))

    page.route("**/v1/receipts?status=waiting*", as_requested)
    page.route(f"**/v1/receipts/{waiting['id']}", as_requested)
    sign_in(page, scenario, key=key)
    page.locator("[data-nav=approvals]").click()
    row = page.locator(f"[data-testid=approvals] [data-receipt-id={waiting['id']}]")
    expect(row).to_be_visible()

    row.locator("[data-action=approve]").click()
    expect(row.locator("[role=alert]")).to_contain_text("Say who decides")
    row.locator("input[name=by]").fill("ana")
    row.locator("[data-action=approve]").click()
    problem = row.locator("[data-testid=problem]")
    expect(problem).to_have_attribute("data-status", "404")
    expect(problem).to_contain_text(f"POST /v1/receipts/{waiting['id']}/approve")
    expect(problem).to_contain_text("does not take approval decisions")
    row.locator("[data-action=reject]").click()
    expect(problem).to_contain_text(f"POST /v1/receipts/{waiting['id']}/reject")
    screenshot(page, "approvals-problem")

    row.locator("a").first.click()  # the receipt's own page has the same buttons
    with scenario.stack.client(key) as client:
        events = client.get(f"/v1/receipts/{waiting['id']}/events").json()["data"]
    expect(page.locator("[data-testid=timeline] [data-event]")).to_have_count(len(events))
    page.locator("input[name=by]").fill("ana")
    page.locator("[data-action=reject]").click()
    expect(page.locator(".approval [data-testid=problem]")).to_have_attribute("data-status", "404")
    expect(page.locator("[data-action=approve]")).to_be_visible()
    with scenario.stack.client(key) as client:
        assert client.get(f"/v1/receipts/{waiting['id']}").json()["status"] == "waiting"


def test_the_runs_pages_show_the_missing_api_politely(page: Page, scenario: Scenario) -> None:
    sign_in(page, scenario)
    page.locator("[data-nav=runs]").click()
    problem = page.locator("[data-testid=problem]")
    expect(problem).to_have_attribute("data-status", "404")
    expect(problem).to_contain_text("GET /v1/runs")
    expect(problem).to_contain_text("does not offer agent runs")
    screenshot(page, "runs")
    page.evaluate("location.hash = '#/runs/run_unknown'")
    expect(page.locator("[data-testid=problem]")).to_contain_text("GET /v1/runs/run_unknown")
    page.locator("[data-nav=receipts]").click()  # the rest of the console still works
    expect(page.locator("[data-receipt-id]")).to_have_count(3)
