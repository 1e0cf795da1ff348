"""A page rendered in Debian's headless Chromium, with every request it started.

``render(url)`` runs ``chromium --dump-dom`` with a network log and returns the DOM after the
page's scripts ran and each request Chromium started (``Fetch``). Any host but 127.0.0.1 is
refused before a name is looked up, so nothing leaves the machine. Tests that need it skip
where /usr/bin/chromium is missing (.ci/run installs it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

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

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian's chromium is not installed"
)


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
