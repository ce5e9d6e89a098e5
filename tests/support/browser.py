"""Headless Chromium (Debian's package) driven by Playwright, kept off every address but 127.0.0.1.

Playwright's own browser downloads are not used: tests launch ``/usr/bin/chromium`` (``.ci/run``
installs it) and fail, never skip, when it is missing. Every request a page makes to another host is
aborted and recorded, so a test can assert that a page loads nothing from the internet.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from PIL import Image
from playwright.sync_api import Browser, BrowserContext, Page, Route, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("TOOLRELAY_TEST_CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = ROOT / ".ci" / "artifacts" / "screenshots"
LOCAL_HOSTS = {"127.0.0.1"}
ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
    # Below Playwright's routing, too: no host name resolves, so nothing but 127.0.0.1 is reachable.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]
VIEWPORT = {"width": 1280, "height": 860}


@contextmanager
def chromium() -> Iterator[Browser]:
    """Launch Debian's Chromium headless; a missing binary fails the test.

    Playwright's ``launch`` gives the browser a fresh temporary profile (user data dir) every time
    and removes it on close; each test then opens a context of its own with ``tab``.
    """
    if not CHROMIUM.exists():
        raise AssertionError(f"{CHROMIUM} is missing: install Debian's chromium (bash .ci/run does)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Tab:
    """A page in its own browser context: every URL it requested, those it was refused (not on
    127.0.0.1), and the uncaught errors its scripts threw."""

    page: Page
    context: BrowserContext
    requested: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@contextmanager
def tab(browser: Browser) -> Iterator[Tab]:
    """A fresh context (no cookies, empty session storage) whose requests may only go to 127.0.0.1."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    opened = Tab(page, context)

    def guard(route: Route) -> None:
        url = route.request.url
        opened.requested.append(url)
        if urlsplit(url).scheme in ("data", "blob") or urlsplit(url).hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            opened.blocked.append(url)
            route.abort("blockedbyclient")

    context.route("**/*", guard)
    page.on("pageerror", lambda exc: opened.errors.append(str(exc)))
    try:
        yield opened
    finally:
        context.close()


def assert_not_blank(path: Path) -> None:
    """A blank page has a colour or two; a page with text and pictures has many, and a good share
    of its pixels differ from its background (its most common colour)."""
    with Image.open(path) as image:
        rgb = image.convert("RGB")
        colours = rgb.getcolors(maxcolors=rgb.width * rgb.height) or []
    background = max(count for count, _ in colours)
    drawn = 1 - background / (rgb.width * rgb.height)
    assert len(colours) > 64 and drawn > 0.02, f"{path} looks blank: {len(colours)} colours, {drawn:.1%} drawn"


def screenshot(page: Page, name: str, *, full_page: bool = True) -> Path:
    """Save a screenshot as .ci/artifacts/screenshots/<name>.png and check that it is not blank."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    assert_not_blank(path)
    return path
