"""A byte-bound worker keeps its tool work (docs/design.md, "Prompt fit on
the worker"): the bound backs prompt_overflow_refused for tool requests only when the operator
adds the preamble's size with --template-overhead, so without it the worker keeps ``tools``
declared and withholds only that guarantee for tool requests. The openai SDK calls the live
front, over the live native API, while the real chat worker (``horde-chat worker``, started
as the CLI starts it) serves from the OpenAI backend double, which has no counter route."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from generated.chat.names import (
    FEATURE_TOOLS,
    GUARANTEE_PROMPT_OVERFLOW_REFUSED,
    SCOPE_PROMPT_OVERFLOW_REFUSED_EXCEPT_TOOLS,
)
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from runtime.worker.backend import BackendClient
from runtime.worker.cli import RunningWorker, describe
from runtime.worker.config import WorkerConfig
from runtime.worker.declaration import probe
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.doubles.backend_script import Reply
from tests.doubles.openai_backend import OpenAIBackendDouble
from tests.support.front import running_front
from tests.support.workers import serving

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

MODEL = "byte-bound-model"
CONTEXT = 8192
MESSAGES: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
BEST_EFFORT = {"horde": {"conformance": "best_effort"}}
FRONT = {"poll_interval": 0.5, "grace": 5.0, "deadline": 60.0, "queue_info_wait": 0.5}


@pytest.fixture
def backend() -> Iterator[OpenAIBackendDouble]:
    # No tokenize route: the worker counts with the byte bound. The first two scripted
    # replies answer the startup tool probes (a forced call with one tool comes back).
    with OpenAIBackendDouble(
        model=MODEL, default_reply=Reply(content="OK"), tokenize_route=False
    ) as double:
        double.script(
            Reply(content=None, tool_calls=[{"name": "probe_flag", "arguments": "{}"}]),
            Reply(content="no call"),
        )
        yield double


@pytest.fixture
def worker(
    native_service: NativeService,
    native_client: httpx.Client,
    owner: MadeUser,
    backend: OpenAIBackendDouble,
) -> Iterator[RunningWorker]:
    config = WorkerConfig(
        native_service.url,
        owner.api_key,
        backend.openai_base_url,
        name="byte-bound-worker",
        context=CONTEXT,
        chat_only=True,
        poll_interval=0.05,
    )
    with serving(config, native_client) as running:
        yield running


@pytest.fixture
def sdk(
    horde_stores: EmbeddedStores,
    native_service: NativeService,
    native_db: Any,
    requester: MadeUser,
) -> Iterator[openai.OpenAI]:
    with (
        running_front(
            horde_stores.redis_url, [native_service.url], service_passkey=SERVICE_PASSKEY, **FRONT
        ) as front,
        openai.OpenAI(base_url=front.url + "/v1", api_key=requester.api_key, max_retries=0) as c,
    ):
        yield c


@pytest.mark.raised_limits(
    "chat_async",
    why="three requests in a row from one address and key; the declaration is under test",
)
def test_a_byte_bound_worker_keeps_tools_and_withholds_the_guarantee_for_tool_requests_only(
    worker: RunningWorker, backend: OpenAIBackendDouble, sdk: openai.OpenAI
) -> None:
    assert worker.probed.counter.kind == "byte-bound"
    declared = set(worker.probed.features)
    assert {
        FEATURE_TOOLS,
        GUARANTEE_PROMPT_OVERFLOW_REFUSED,
        SCOPE_PROMPT_OVERFLOW_REFUSED_EXCEPT_TOOLS,
    } <= declared
    printed = "\n".join(describe(worker.probed))  # what it prints at startup
    assert "strict tool requests go to other workers" in printed
    assert "--template-overhead" in printed

    # Strict (the default) with tools: the bound does not back the guarantee, so no worker
    # declares what the request requires: an immediate 404, nothing reaches the backend.
    served_before = len(backend.chat_requests())
    with pytest.raises(openai.NotFoundError) as refused:
        sdk.chat.completions.create(model=MODEL, messages=MESSAGES, tools=[WEATHER])
    assert refused.value.code == "no_worker_supports_features"
    assert "prompt_overflow_refused" in refused.value.message
    assert len(backend.chat_requests()) == served_before

    # best_effort with tools reaches the worker and is answered with the call.
    backend.script(
        Reply(content=None, tool_calls=[{"name": "get_weather", "arguments": '{"city": "Paris"}'}])
    )
    answer = sdk.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=[WEATHER], extra_body=BEST_EFFORT
    )
    calls = answer.choices[0].message.tool_calls or []
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        ("get_weather", '{"city": "Paris"}')
    ]
    assert answer.choices[0].finish_reason == "tool_calls"
    assert backend.chat_requests()[-1].body["tools"][0]["function"]["name"] == "get_weather"

    # A strict request without tools still has the guarantee here.
    backend.script(Reply(content="Sunny."))
    plain = sdk.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert plain.choices[0].message.content == "Sunny."


def test_template_overhead_backs_the_guarantee_for_tool_requests(
    backend: OpenAIBackendDouble,
) -> None:
    config = WorkerConfig(
        "http://127.0.0.1:9",
        "unused",
        backend.openai_base_url,
        context=CONTEXT,
        template_overhead=64,
    )
    with BackendClient(config.backend_base, timeout=10) as client:
        probed = probe(client, config)
    assert {FEATURE_TOOLS, GUARANTEE_PROMPT_OVERFLOW_REFUSED} <= set(probed.features)
    assert SCOPE_PROMPT_OVERFLOW_REFUSED_EXCEPT_TOOLS not in probed.features
