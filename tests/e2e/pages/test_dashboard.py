"""The dashboard (the native API's ``/dashboard``) in headless Chromium, on the embedded stack
with the demo worker: after requests through the front it shows the worker and its model,
the age of the model's oldest queued request, charts the past hour as the horde's history
route counts it (requests the page never saw included), follows a new one without a
reload, and reads only public routes: no key and no prompt reach the page.

With ``HORDE_DOCS_SCREENSHOTS`` set to a folder (``docs/images``), the test saves the page
there as ``dashboard.png``, the docs' screenshot.
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from openai import OpenAI
from playwright.sync_api import Locator, Page, Request, expect
from sqlalchemy import insert, update
from sqlalchemy.orm import Session, sessionmaker

from generated.routes import ROUTES
from runtime.native.db.tables import TextGenStat, WaitingPrompt
from runtime.native.queue.sweep import utcnow
from runtime.native.server import NativeService
from runtime.stores.database import transaction
from runtime.worker.cli import RunningWorker
from runtime.worker.tiny_model import MODEL_NAME
from tests.conftest import MadeUser
from tests.e2e.pages.stack import WAIT

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

PROMPT = "A question only the requester should see"
REQUESTS = 3
HISTORY_SERVED = "stats_text_history" in ROUTES
"""The horde's per-minute history, which the charts draw."""
EARLIER_TOKENS = 7
"""The requested length of a job that ended half an hour before the page opened."""
OLDEST_WAIT_COLUMN = 5
"""The models table's Oldest waiting column."""


def ask(sdk: OpenAI, times: int) -> None:
    for _ in range(times):
        sdk.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": PROMPT}]
        )


def an_earlier_job(sessions: sessionmaker[Session]) -> None:
    """A job that ended 30 minutes ago, long before the page opened."""
    with transaction(sessions) as session:
        session.execute(
            insert(TextGenStat).values(
                finished=utcnow() - timedelta(minutes=30, seconds=30),
                model=MODEL_NAME,
                max_length=EARLIER_TOKENS,
                delivered=True,
            )
        )


def a_request_waiting_10_minutes(
    native_client: httpx.Client, sessions: sessionmaker[Session], api_key: str
) -> None:
    """A text request for the demo model that only a worker the horde lacks may serve: it
    stays queued; then it is made 10 minutes old."""
    body = {"prompt": "Hi", "models": [MODEL_NAME], "workers": ["no-such-worker"]}
    queued = native_client.post("/generate/text/async", headers={"apikey": api_key}, json=body)
    assert queued.status_code == 202, queued.text
    with transaction(sessions) as session:
        session.execute(
            update(WaitingPrompt)
            .where(WaitingPrompt.id == queued.json()["id"])
            .values(created=WaitingPrompt.created - timedelta(minutes=10))
        )


def the_hour(native_client: httpx.Client, key: str) -> str:
    return str(sum(p[key] for p in native_client.get("/stats/text/history").json()))


def test_the_dashboard_shows_the_worker_and_charts_the_requests_just_made(
    page: Page,
    native_service: NativeService,
    native_client: httpx.Client,
    native_db: sessionmaker[Session],
    front_url: str,
    demo_worker: RunningWorker,
    requester: MadeUser,
) -> None:
    an_earlier_job(native_db)
    with OpenAI(base_url=front_url + "/v1", api_key=requester.api_key, max_retries=0) as sdk:
        ask(sdk, REQUESTS)
        a_request_waiting_10_minutes(native_client, native_db, requester.api_key)
        asked: list[Request] = []
        page.on("request", lambda request: asked.append(request))
        page.goto(native_service.url + "/dashboard")
        worker = page.locator("#workers tbody tr[data-worker='demo-worker']")
        expect(worker).to_contain_text("online")
        expect(worker).to_contain_text(MODEL_NAME)
        model = page.locator(f"#models tbody tr[data-model='{MODEL_NAME}']")
        expect(model.locator("td").nth(1)).to_have_text("1")  # one worker serves it
        oldest = page.locator("#models thead th").nth(OLDEST_WAIT_COLUMN)
        expect(oldest).to_have_text("Oldest waiting")
        expect(model.locator("td").nth(OLDEST_WAIT_COLUMN)).to_have_text(re.compile(r"^1\d min$"))
        requests_chart = page.locator("#requests-chart")
        tokens_chart = page.locator("#tokens-chart")
        if HISTORY_SERVED:
            # the hour as the horde counts it: the job that ended before the page opened too
            expect_hour(requests_chart, str(REQUESTS + 1))
            expect(tokens_chart).to_have_attribute("data-total", the_hour(native_client, "tokens"))
            expect(requests_chart.locator("svg")).to_have_attribute(
                "aria-label", re.compile(f": {REQUESTS + 1} in all, highest ")
            )
        shots = os.environ.get("HORDE_DOCS_SCREENSHOTS")
        if shots:
            page.screenshot(path=str(Path(shots) / "dashboard.png"), full_page=True)
        earned = page.locator("[data-figure=kudos-earned] dd small")
        expect(earned).to_have_text("+0 since this page opened")
        # a new request shows without a reload
        ask(sdk, 1)
        expect(earned).not_to_have_text("+0 since this page opened", timeout=WAIT * 1000)
        if HISTORY_SERVED:
            expect_hour(requests_chart, str(REQUESTS + 2), timeout=WAIT * 1000)
    # public reads only, from its own origin, with no key; neither key nor prompt shown
    here = urlsplit(native_service.url).netloc
    for request in asked:
        assert urlsplit(request.url).netloc == here, request.url
        assert request.method == "GET", request.url
        assert "apikey" not in request.headers
        assert "authorization" not in request.headers
    html = page.content()
    assert requester.api_key not in html
    assert PROMPT not in html


def expect_hour(chart: Locator, requests: str, timeout: float | None = None) -> None:
    """The chart draws sixty minutes, one polyline, and ``requests`` over them."""
    expect(chart).to_have_attribute("data-total", requests, timeout=timeout)
    expect(chart).to_have_attribute("data-points", "60")
    expect(chart.locator("svg polyline")).to_have_count(1)
