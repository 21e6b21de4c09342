"""Headless Chromium (Debian's ``chromium``) driven by Playwright, for tests that assert on the
rendered report. ``make test`` installs both (``make test-deps``) and sets
``REVERIE_REQUIRE_BROWSER=1``, so there a missing browser fails instead of skipping; a developer's
bare ``pytest`` without them skips with the command that installs them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def _missing(reason: str) -> None:
    if os.environ.get("REVERIE_REQUIRE_BROWSER"):
        pytest.fail(f"{reason} (REVERIE_REQUIRE_BROWSER is set)")
    pytest.skip(f"{reason}: run `make test-deps` (installs chromium with apt-get and playwright with pip)")


@dataclass
class Page:
    """A loaded report page, plus every request the page attempted that was not its own file."""

    page: Any
    foreign: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@contextmanager
def chromium() -> Iterator[Any]:
    """One headless Chromium for a test module: starting Playwright and the browser takes a second
    or two, a fresh context in it a fraction of that (tests get one each from ``open_report``)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed")
    if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
        _missing(f"{CHROMIUM} is not installed")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def open_report(browser: Any, path: Path) -> Iterator[Page]:
    """Open ``path`` from disk in a fresh browser context (no cookies, storage or cache from another
    test's page); network requests are counted and refused."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        loaded = Page(page)

        def route(r: Any) -> None:
            url = r.request.url
            if url.startswith("file://"):
                r.continue_()
            else:
                loaded.foreign.append(url)
                r.abort()

        context.route("**/*", route)
        page.on("pageerror", lambda exc: loaded.errors.append(str(exc)))
        page.on("request", lambda req: None if req.url.startswith("file://") else loaded.foreign.append(req.url))
        page.goto(path.resolve().as_uri())
        page.wait_for_selector("body[data-ready='1']", timeout=10_000)
        yield loaded
    finally:
        context.close()
