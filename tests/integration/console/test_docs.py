"""/docs renders the API's operations in a browser that can reach nothing but 127.0.0.1."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import expect

from tests.integration.console.conftest import Scenario
from tests.support.browser import Tab, screenshot

pytestmark = pytest.mark.integration


def test_docs_render_their_operations_with_nothing_from_the_internet(opened: Tab, scenario: Scenario) -> None:
    page = opened.page
    page.goto(f"{scenario.stack.base_url}/docs")
    operation = page.locator("#operations-receipts-create_tool_call_v1_tool_calls_post")
    expect(operation).to_be_visible()
    expect(operation.locator(".opblock-summary-method")).to_have_text("POST")
    expect(operation.locator(".opblock-summary-path")).to_have_text("/v1/tool-calls")
    expect(page.locator(".opblock")).to_have_count(len(
        [op for path in scenario.get("/openapi.json")["paths"].values() for op in path]))
    screenshot(page, "docs", full_page=False)
    scripts = [url for url in opened.requested if url.endswith(".js")]
    assert scripts and all(urlsplit(url).hostname == "127.0.0.1" for url in opened.requested), opened.requested
    # The opened fixture asserts, once the test is done, that nothing else was even tried.


def test_redoc_is_not_served(scenario: Scenario) -> None:
    # ReDoc's page fetches its logo from its vendor's CDN; /docs is the API's one interactive page.
    assert httpx.get(f"{scenario.stack.base_url}/redoc").status_code == 404
