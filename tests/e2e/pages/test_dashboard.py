"""The dashboard (the native API's ``/dashboard``) in headless Chromium, on the embedded stack
with the demo worker: after requests through the front it shows the worker and its model,
charts the requests just made, follows a new one without a reload, and reads only public
routes: no key and no prompt reach the page.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from openai import OpenAI
from playwright.sync_api import Page, Request, expect

from generated.routes import ROUTES
from runtime.native.server import NativeService
from runtime.worker.cli import RunningWorker
from runtime.worker.tiny_model import MODEL_NAME
from tests.conftest import MadeUser
from tests.e2e.pages.stack import WAIT

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

PROMPT = "A question only the requester should see"
REQUESTS = 3
STATS_SERVED = "stats_text_totals" in ROUTES
"""Upstream's text stats route, which the charts read."""


def ask(sdk: OpenAI, times: int) -> None:
    for _ in range(times):
        sdk.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": PROMPT}]
        )


def test_the_dashboard_shows_the_worker_and_charts_the_requests_just_made(
    page: Page,
    native_service: NativeService,
    front_url: str,
    demo_worker: RunningWorker,
    requester: MadeUser,
) -> None:
    with OpenAI(base_url=front_url + "/v1", api_key=requester.api_key, max_retries=0) as sdk:
        ask(sdk, REQUESTS)
        asked: list[Request] = []
        page.on("request", lambda request: asked.append(request))
        page.goto(native_service.url + "/dashboard")
        worker = page.locator("#workers tbody tr[data-worker='demo-worker']")
        expect(worker).to_contain_text("online")
        expect(worker).to_contain_text(MODEL_NAME)
        model = page.locator(f"#models tbody tr[data-model='{MODEL_NAME}']")
        expect(model.locator("td").nth(1)).to_have_text("1")  # one worker serves it
        requests_chart = page.locator("#requests-chart")
        if STATS_SERVED:
            expect(requests_chart).to_have_attribute("data-latest", str(REQUESTS))
            expect(requests_chart.locator("svg polyline")).to_have_count(1)
            expect(requests_chart.locator("svg")).to_have_attribute(
                "aria-label", re.compile(f", now {REQUESTS}, highest {REQUESTS}$")
            )
        earned = page.locator("[data-figure=kudos-earned] dd small")
        expect(earned).to_have_text("+0 since this page opened")
        # a new request shows without a reload
        ask(sdk, 1)
        expect(earned).not_to_have_text("+0 since this page opened", timeout=WAIT * 1000)
        if STATS_SERVED:
            expect(requests_chart).to_have_attribute(
                "data-latest", str(REQUESTS + 1), timeout=WAIT * 1000
            )
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
