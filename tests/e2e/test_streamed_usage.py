"""End to end on the demo model (the openai SDK -> the front -> the native API -> the chat
worker -> llama-cpp-python): a streamed reply's usage chunk carries the worker's counts, the
numbers the same request gets unstreamed (issue 11: LangChain and LiteLLM cost tracking read
it). llama-cpp-python sends no usage in a stream, so the worker counts with its exact
counter: the prompt as its fit check counted it, the reply by tokenizing its text.
"""

from __future__ import annotations

import threading
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
from runtime.worker.tiny_model import DEMO_REPLY, MODEL_NAME
from tests.conftest import MadeUser
from tests.support.demo_model import build_demo_gguf
from tests.support.front import running_front

pytestmark = pytest.mark.e2e

CONTEXT = 2048
QUESTION = [{"role": "user", "content": "Who are you? Answer in one sentence, please."}]


@pytest.fixture(scope="module")
def demo_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo_gguf(tmp_path_factory)


@pytest.fixture(scope="module")
def llama(demo_gguf: Path) -> Iterator[LlamaServer]:
    with LlamaServer(demo_gguf, n_ctx=CONTEXT) as server:
        yield server


@pytest.fixture(scope="module")
def front(horde_stores: EmbeddedStores, native_service: Any) -> Iterator[FrontService]:
    with running_front(
        horde_stores.redis_url, [native_service.url], deadline=60, grace=20, poll_interval=1
    ) as service:
        yield service


@pytest.fixture
def sdk(
    llama: LlamaServer,
    demo_gguf: Path,
    native_service: Any,
    native_client: httpx.Client,
    front: FrontService,
    make_user: Callable[..., MadeUser],
) -> Iterator[OpenAI]:
    owner, requester = make_user("demo-worker"), make_user("alice", kudos=1000)
    config = WorkerConfig(
        native_service.url,
        owner.api_key,
        llama.openai_base_url,
        context=CONTEXT,
        gguf=demo_gguf,
        poll_interval=0.05,
    )
    worker = RunningWorker.start(config)
    try:
        waited = threading.Event()
        while not native_client.get("/workers").json():  # online once it popped
            assert not waited.wait(0.05), "the worker never popped"
        with OpenAI(base_url=f"{front.url}/v1", api_key=requester.api_key, max_retries=0) as c:
            yield c
    finally:
        worker.stop(grace=5)


def test_streamed_usage_is_the_workers_counts_the_same_as_the_plain_reply(sdk: OpenAI) -> None:
    plain = sdk.chat.completions.create(model=MODEL_NAME, messages=QUESTION)  # type: ignore[arg-type]
    stream = sdk.chat.completions.create(
        model=MODEL_NAME,
        messages=QUESTION,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == DEMO_REPLY
    usage_chunks = [c for c in chunks if not c.choices]
    assert len(usage_chunks) == 1
    assert usage_chunks[0].usage is not None
    assert plain.usage is not None
    streamed, counted = usage_chunks[0].usage, plain.usage
    assert (streamed.prompt_tokens, streamed.completion_tokens, streamed.total_tokens) == (
        counted.prompt_tokens,
        counted.completion_tokens,
        counted.total_tokens,
    )
    extra = usage_chunks[0].model_extra or {}
    assert extra["x_horde"]["estimated_usage"] is False  # counted, not the front's estimate
