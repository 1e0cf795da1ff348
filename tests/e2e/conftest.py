"""The demo stack's parts that end-to-end modules share: the demo model's gguf, llama-cpp-python
serving it, and fronts on the session's native API (module-scoped: built and started once per
module that asks for them): ``demo_front``, and ``front``, which presents the native API's
service passkey (a module may define a ``front`` of its own); ``demo_stack`` is a test's demo
worker and an SDK on ``demo_front``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from runtime.front.server import FrontService
from runtime.stores.embedded import EmbeddedStores
from runtime.worker.cli import RunningWorker
from runtime.worker.config import WorkerConfig
from runtime.worker.llama_server import LlamaServer
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.support.demo_model import DEMO_CONTEXT, build_demo_gguf
from tests.support.front import running_front
from tests.support.workers import serving


@pytest.fixture(scope="module")
def demo_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo_gguf(tmp_path_factory)


@pytest.fixture(scope="module")
def demo_llama(demo_gguf: Path) -> Iterator[LlamaServer]:
    with LlamaServer(demo_gguf, n_ctx=DEMO_CONTEXT) as server:
        yield server


@pytest.fixture(scope="module")
def demo_front(horde_stores: EmbeddedStores, native_service: Any) -> Iterator[FrontService]:
    with running_front(
        horde_stores.redis_url, [native_service.url], deadline=60, grace=20, poll_interval=1
    ) as service:
        yield service


@pytest.fixture(scope="module")
def front(horde_stores: EmbeddedStores, native_service: Any) -> Iterator[FrontService]:
    """A front trusted by the session's native API (its passkey: the client's address is
    forwarded), with short waits."""
    with running_front(
        horde_stores.redis_url,
        [native_service.url],
        service_passkey=SERVICE_PASSKEY,
        deadline=30,
        grace=5,
        poll_interval=0.5,
    ) as service:
        yield service


DemoStack = tuple[OpenAI, RunningWorker]
"""``demo_stack``: the SDK and the worker."""


@pytest.fixture
def demo_stack(
    demo_llama: LlamaServer,
    demo_gguf: Path,
    native_service: Any,
    native_client: httpx.Client,
    demo_front: FrontService,
    make_user: Callable[..., MadeUser],
) -> Iterator[DemoStack]:
    """A demo worker (the CLI's, on ``demo_llama``) once it popped, and an SDK on
    ``demo_front`` for a requester with 1,000 kudos."""
    owner, requester = make_user("demo-worker"), make_user("alice", kudos=1000)
    config = WorkerConfig(
        native_service.url,
        owner.api_key,
        demo_llama.openai_base_url,
        context=DEMO_CONTEXT,
        gguf=demo_gguf,
        poll_interval=0.05,
    )
    with (
        serving(config, native_client) as worker,
        OpenAI(base_url=f"{demo_front.url}/v1", api_key=requester.api_key, max_retries=0) as sdk,
    ):
        yield sdk, worker
