"""What the pages' tests in Chromium share: the browser, a front at the shipped settings, the
demo worker (on llama-cpp-python serving the demo model), and a page whose script errors fail
the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page

from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from runtime.worker.cli import RunningWorker
from runtime.worker.config import WorkerConfig
from runtime.worker.llama_server import LlamaServer
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.support.chromium import DESKTOP, PageErrors, chromium
from tests.support.demo_model import DEMO_CONTEXT
from tests.support.front import running_front
from tests.support.workers import serving


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
def front_url(horde_stores: EmbeddedStores, native_service: NativeService) -> Iterator[str]:
    """A front at the shipped settings (its keep-alive, the queue note, every 5 s)."""
    with running_front(
        horde_stores.redis_url, [native_service.url], service_passkey=SERVICE_PASSKEY
    ) as front:
        yield front.url


@pytest.fixture
def demo_worker(
    demo_llama: LlamaServer,
    demo_gguf: Path,
    native_service: NativeService,
    native_client: httpx.Client,
    make_user: Callable[..., MadeUser],
) -> Iterator[RunningWorker]:
    owner = make_user("demo-owner")
    config = WorkerConfig(
        native_service.url,
        owner.api_key,
        demo_llama.openai_base_url,
        name="demo-worker",
        context=DEMO_CONTEXT,
        gguf=demo_gguf,
    )
    with serving(config, native_client) as worker:
        yield worker


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    errors = PageErrors(page)
    yield page
    context.close()
    assert errors.errors == []
