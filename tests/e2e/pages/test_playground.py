"""The playground (the front's ``/``) in headless Chromium, on the embedded stack: the demo
worker on llama-cpp-python serving the demo model, and a second worker whose OpenAI backend
double streams slowly (``slow-model``), for what takes time to see: a reply painted over
several frames, the queue position while a request waits, Stop.

Every page runs under its own Content-Security-Policy; a script error fails the test.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from generated.errors import InvalidAPIKey
from runtime.native.db.tables import User, WaitingPrompt
from runtime.native.server import NativeService
from runtime.worker.cli import RunningWorker
from runtime.worker.config import WorkerConfig
from runtime.worker.tiny_model import DEMO_REPLY, MODEL_NAME
from tests.conftest import MadeUser
from tests.doubles.backend_script import Reply
from tests.doubles.openai_backend import OpenAIBackendDouble
from tests.e2e.pages.stack import WAIT
from tests.support.chromium import PHONE, PageErrors
from tests.support.waiting import until
from tests.support.workers import serving

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

SLOW_MODEL = "slow-model"
SLOW_PIECES = [f"word{i} " for i in range(40)]
SLOW_DELAY = 0.25
"""Seconds between the slow backend's chunks: its reply takes 10 s, posted about once a
second by its worker."""
REASONING = "The user wants a story. A short one will do."
ANSWER = "Once upon a time there was a horde. The end."
REQUESTER_KUDOS = 10_000
"""What tests/conftest.py's requester starts with."""
SECONDS = re.compile(r"^\d+\.\d\d s$")
QUEUED = re.compile(r"^Queued: position \d+, estimated wait \d+ s \(\d+ s\)$")
PAINTS = """
window.paints = [];
const record = () => {
  const replies = document.querySelectorAll('.message.assistant .text');
  const length = replies.length ? replies[replies.length - 1].textContent.length : -1;
  if (window.paints[window.paints.length - 1] !== length) window.paints.push(length);
  requestAnimationFrame(record);
};
requestAnimationFrame(record);
"""
"""Records the last reply's length at every animation frame (what each paint showed)."""


@pytest.fixture
def slow_reply(request: pytest.FixtureRequest) -> Reply:
    """What the slow backend answers every job (a test may pass another, indirectly)."""
    default = Reply(content="".join(SLOW_PIECES), chunks=SLOW_PIECES, chunk_delay=SLOW_DELAY)
    return getattr(request, "param", default)


@pytest.fixture
def slow_worker(
    slow_reply: Reply,
    native_service: NativeService,
    native_client: httpx.Client,
    make_user: Callable[..., MadeUser],
) -> Iterator[RunningWorker]:
    owner = make_user("slow-owner")
    with OpenAIBackendDouble(model=SLOW_MODEL, default_reply=Reply(content="OK")) as backend:
        config = WorkerConfig(
            native_service.url,
            owner.api_key,
            backend.openai_base_url,
            name="slow-worker",
            context=16384,
            chat_only=True,
        )
        with serving(config, native_client) as worker:
            backend.default_reply = slow_reply  # every job after the startup probes
            yield worker


def open_playground(page: Page, front_url: str, model: str) -> None:
    page.add_init_script(PAINTS)
    page.goto(front_url + "/")
    expect(page.get_by_label("Model", exact=True)).to_contain_text(model)
    page.get_by_label("Model", exact=True).select_option(model)


def test_a_message_streams_back_with_its_tokens_kudos_model_and_timings(
    page: Page,
    front_url: str,
    demo_worker: RunningWorker,
    requester: MadeUser,
    native_db: sessionmaker[Session],
) -> None:
    page.goto(front_url + "/")
    key = page.get_by_label("API key")
    key.fill(requester.api_key)
    key.press("Tab")  # the change event: kept in this browser, the models read with it
    expect(page.get_by_label("Model", exact=True)).to_have_value(MODEL_NAME)
    prompt = page.get_by_label("Message", exact=True)
    prompt.fill("Who are you?")
    prompt.press("Shift+Enter")  # a new line, not a send
    prompt.press_sequentially("One sentence, please.")
    expect(page.locator(".message")).to_have_count(0)
    prompt.press("Enter")
    expect(page.locator(".message.user .text")).to_have_text("Who are you?\nOne sentence, please.")
    reply = page.locator(".message.assistant").last
    expect(reply.locator(".text")).to_have_text(DEMO_REPLY)
    meta = reply.locator(".meta")
    expect(meta.locator("[data-meta=model] dd")).to_have_text(MODEL_NAME)
    expect(meta.locator("[data-meta=tokens] dd")).to_contain_text(" in, ")
    for timing in ("first-token", "total"):
        expect(meta.locator(f"[data-meta={timing}] dd")).to_have_text(SECONDS)
    # the kudos line is what the request cost the requester (the charge and the horde tax)
    with native_db() as session:
        balance = session.scalars(select(User.kudos).where(User.id == requester.id)).one()
    charged = REQUESTER_KUDOS - float(balance)
    assert charged > 0
    assert float(meta.locator("[data-meta=kudos] dd").inner_text()) == pytest.approx(
        charged, abs=0.01
    )
    # the key stays in the browser: a reload keeps it in the field
    page.reload()
    expect(page.get_by_label("API key")).to_have_value(requester.api_key)


def test_a_slow_reply_arrives_over_several_paints_and_stop_cancels_it(
    page: Page,
    front_url: str,
    slow_worker: RunningWorker,
    native_db: sessionmaker[Session],
) -> None:
    open_playground(page, front_url, SLOW_MODEL)
    page.get_by_label("Message", exact=True).fill("Tell me a long story")
    page.get_by_role("button", name="Send").click()
    text = page.locator(".message.assistant .text")
    expect(text).to_contain_text("word3 ", timeout=WAIT * 1000)
    stop = page.get_by_role("button", name="Stop")
    stop.click()
    expect(page.locator(".message.assistant .note")).to_have_text(
        "Stopped: the request was cancelled."
    )
    expect(page.get_by_role("button", name="Send")).to_be_visible()
    shown = text.inner_text()
    assert 0 < len(shown) < len("".join(SLOW_PIECES))
    # the reply grew on screen: several frames showed a part of it
    paints: list[int] = page.evaluate("window.paints")
    partial = {length for length in paints if 0 < length < len("".join(SLOW_PIECES))}
    assert len(partial) >= 2, paints

    # closing the stream cancelled the request on the horde
    def cancelled() -> bool:
        with native_db() as session:
            rows = session.scalars(select(WaitingPrompt)).all()
            return len(rows) == 1 and rows[0].cancelled

    until(cancelled, "the cancel of the stopped request")


def test_a_waiting_request_shows_its_queue_position_and_estimated_wait(
    browser: Browser, page: Page, front_url: str, slow_worker: RunningWorker
) -> None:
    # the slow worker's one thread is busy with a first request ...
    open_playground(page, front_url, SLOW_MODEL)
    page.get_by_label("Message", exact=True).fill("First")
    page.keyboard.press("Enter")
    expect(page.locator(".message.assistant .text")).not_to_be_empty(timeout=WAIT * 1000)
    # ... so a second one, from another tab, waits in the queue and says where it stands
    second = page.context.new_page()
    errors = PageErrors(second)
    open_playground(second, front_url, SLOW_MODEL)
    second.get_by_label("Message", exact=True).fill("Second")
    second.keyboard.press("Enter")
    expect(second.get_by_role("status").filter(has_text="Queued")).to_have_text(
        QUEUED,
        timeout=WAIT * 1000,
    )
    second.keyboard.press("Escape")  # Escape stops too
    expect(second.locator(".message.assistant .note")).to_have_text(
        "Stopped: the request was cancelled."
    )
    page.get_by_role("button", name="Stop").click()
    assert errors.errors == []


@pytest.mark.parametrize(
    "slow_reply",
    [Reply(content=ANSWER, reasoning_content=REASONING, think_tags=True, chunk_delay=0.15)],
    indirect=True,
)
def test_the_reasoning_shows_while_it_streams_and_folds_away_once_the_answer_starts(
    page: Page, front_url: str, slow_worker: RunningWorker
) -> None:
    open_playground(page, front_url, SLOW_MODEL)
    page.get_by_label("Message", exact=True).fill("Tell me a story")
    page.keyboard.press("Enter")
    reasoning = page.locator(".message.assistant details.reasoning")
    expect(reasoning).to_have_attribute("open", "", timeout=WAIT * 1000)  # open while it thinks
    expect(page.locator(".message.assistant .text")).to_have_text(ANSWER, timeout=WAIT * 1000)
    expect(page.locator(".message.assistant .meta")).to_be_visible()
    expect(reasoning).not_to_have_attribute("open", "")  # folded once the answer came
    summary = reasoning.locator("summary")
    expect(summary).to_have_text(f"Reasoning ({len(REASONING)} characters)")
    summary.click()
    expect(reasoning.locator("pre")).to_have_text(REASONING)
    expect(reasoning.locator("pre")).to_be_visible()


def test_an_error_shows_the_apis_message(
    page: Page, front_url: str, demo_worker: RunningWorker
) -> None:
    open_playground(page, front_url, MODEL_NAME)
    key = page.get_by_label("API key")
    key.fill("not-a-key")  # a key the horde does not know
    key.press("Tab")
    page.get_by_label("Message", exact=True).fill("Who are you?")
    page.get_by_label("Message", exact=True).press("Enter")
    error = InvalidAPIKey()
    expect(page.get_by_role("alert")).to_have_text(
        f"{error.front_status} {error.code}: {error.message}"
    )
    expect(page.locator(".message.user.failed")).to_have_count(1)
    expect(page.get_by_role("button", name="Send")).to_be_visible()


def test_the_page_fits_a_phone(
    browser: Browser, front_url: str, demo_worker: RunningWorker
) -> None:
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    errors = PageErrors(page)
    try:
        page.goto(front_url + "/")
        expect(page.get_by_label("Model", exact=True)).to_have_value(MODEL_NAME)
        # the settings fold away above the conversation; the message box and Send show
        expect(page.locator("#settings-panel")).not_to_have_attribute("open", "")
        expect(page.get_by_role("button", name="Send")).to_be_in_viewport()
        page.get_by_label("Message", exact=True).fill("Who are you?")
        page.get_by_role("button", name="Send").tap()
        expect(page.locator(".message.assistant .text")).to_have_text(DEMO_REPLY)
        expect(page.locator(".meta [data-meta=kudos]")).to_be_visible()
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], "the page scrolls sideways"
    finally:
        context.close()
    assert errors.errors == []
