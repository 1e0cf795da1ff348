"""Debian's headless Chromium for the tests of pages, with nothing leaving the machine.

``render(url)`` runs ``chromium --dump-dom`` with a network log: the DOM after the page's
scripts ran, and each request Chromium started (``Fetch``). ``chromium()`` is a Playwright
browser on the same binary (Playwright downloads none) for pages a test clicks through;
``PageErrors`` collects what a page's scripts threw. Any host but 127.0.0.1 is refused before
a name is looked up. Without /usr/bin/chromium the tests skip, except in CI, where .ci/run
installs it and its absence is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Error, Page, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    # a name no resolver knows is refused here rather than looked up (and still logged)
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)
RENDER_BUDGET_MS = 20000
"""Chromium's virtual time for a page to load its scripts and render."""
CHROMIUM_TIMEOUT = 120
NAME_NOT_RESOLVED = -105
"""net::ERR_NAME_NOT_RESOLVED: what --host-resolver-rules makes of any other host."""

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 860}

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists() and not os.environ.get("CI"),
    reason="Debian's chromium is not installed (apt-get install chromium)",
)
"""Skips a test where Chromium is missing, except in CI, where the test then fails."""


def require_chromium() -> None:
    if CHROMIUM.exists():
        return
    if os.environ.get("CI"):
        pytest.fail(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium")
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)")


@contextmanager
def chromium() -> Iterator[Browser]:
    """A Playwright browser on Debian's Chromium with ``CHROMIUM_FLAGS``."""
    require_chromium()
    with sync_playwright() as playwright:
        # Playwright adds its own headless switch
        flags = [flag for flag in CHROMIUM_FLAGS if flag != "--headless"]
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=flags)
        try:
            yield browser
        finally:
            browser.close()


class PageErrors:
    """Uncaught exceptions and console errors of one page. Chromium's own line for a response
    with an error status (``Failed to load resource``) is not one: the pages answer such a
    response by showing the API's message, which the tests check."""

    NETWORK = "Failed to load resource"

    def __init__(self, page: Page) -> None:
        self.errors: list[str] = []
        page.on("pageerror", self._thrown)
        page.on("console", self._logged)

    def _thrown(self, error: Error) -> None:
        self.errors.append(f"uncaught: {error}")

    def _logged(self, message: ConsoleMessage) -> None:
        if message.type == "error" and not message.text.startswith(self.NETWORK):
            self.errors.append(f"console: {message.text} ({message.location.get('url', '')})")


@dataclass
class Fetch:
    """One request in Chromium's network log (a URL_REQUEST source)."""

    url: str
    top_site: str
    """The network isolation key's top-frame site: the page's site for what the page asked."""
    net_error: int | None = None


@dataclass(frozen=True)
class Rendered:
    dom: str
    fetches: list[Fetch]


def render(url: str, budget_ms: int = RENDER_BUDGET_MS) -> Rendered:
    """The page at ``url`` after ``budget_ms`` of Chromium's virtual time."""
    scratch = Path(tempfile.mkdtemp(prefix="horde-chromium-"))
    net_log = scratch / "net-log.json"
    try:
        run = subprocess.run(
            [
                str(CHROMIUM),
                *CHROMIUM_FLAGS,
                f"--user-data-dir={scratch / 'profile'}",
                f"--log-net-log={net_log}",
                f"--virtual-time-budget={budget_ms}",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=CHROMIUM_TIMEOUT,
            check=False,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        return Rendered(run.stdout, _fetches(net_log))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _fetches(net_log: Path) -> list[Fetch]:
    """Every request Chromium's network log saw start, with how it ended."""
    data: dict[str, Any] = json.loads(net_log.read_text(encoding="utf-8"))
    start_job = data["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    fetches: dict[int, Fetch] = {}
    for event in data.get("events", []):
        if event["type"] != start_job:
            continue
        params = event.get("params") or {}
        source = int(event["source"]["id"])
        if "url" in params:
            site = str(params.get("network_isolation_key", "null")).split(" ")[0]
            fetches[source] = Fetch(str(params["url"]), site)
        elif source in fetches and "net_error" in params:
            fetches[source].net_error = int(params["net_error"])
    return list(fetches.values())
