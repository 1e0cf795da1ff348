"""The chat worker on the real llama-cpp-python server with the demo model.

Asserted: what the demo model determines (its one reply, token counts, JSON that closes at
once under a grammar) and what a grammar forces (a named call with schema-valid arguments);
never which value it picks where the grammar allows several.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from generated.chat.names import (
    FEATURE_JSON_OBJECT,
    FEATURE_JSON_SCHEMA,
    FEATURE_TOOLS,
    GUARANTEE_JSON_OUTPUT_ENFORCED,
    GUARANTEE_JSON_SCHEMA_ENFORCED,
    GUARANTEE_PROMPT_OVERFLOW_REFUSED,
    GUARANTEE_TOOL_CHOICE_ENFORCED,
    GUARANTEE_TOOL_CHOICE_REQUIRED_ENFORCED,
)
from generated.errors import PromptOverflow
from runtime.worker.backend import BackendClient
from runtime.worker.backend_kinds import backend_messages
from runtime.worker.config import WorkerConfig
from runtime.worker.counter import (
    PROBE_MESSAGES,
    BoundedCounter,
    ModelTemplate,
    TemplateCounter,
    prompt_tokens_of,
)
from runtime.worker.declaration import Probed, probe
from runtime.worker.horde import HordeClient
from runtime.worker.job import Job, JobRunner
from runtime.worker.llama_server import LlamaServer
from runtime.worker.tiny_model import DEMO_REPLY, MODEL_NAME
from tests.conftest import MadeUser
from tests.integration.chat_flow import chat_async, chat_status
from tests.integration.native_flow import status, submit_text
from tests.support.demo_model import UNIT_TOOL, build_demo_gguf
from tests.support.workers import until_listed

pytestmark = pytest.mark.integration

CONTEXT = 1024


@pytest.fixture(scope="module")
def demo_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo_gguf(tmp_path_factory)


@pytest.fixture(scope="module")
def server(demo_gguf: Path) -> Iterator[LlamaServer]:
    with LlamaServer(demo_gguf, n_ctx=CONTEXT) as running:
        yield running


def _config(server: LlamaServer, demo_gguf: Path, **options: Any) -> WorkerConfig:
    return WorkerConfig(
        options.pop("horde", "http://unused"),
        options.pop("api_key", "unused"),
        server.openai_base_url,
        context=CONTEXT,
        gguf=demo_gguf,
        **options,
    )


@pytest.fixture(scope="module")
def backend(server: LlamaServer) -> Iterator[BackendClient]:
    with BackendClient(server.base_url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def probed(server: LlamaServer, demo_gguf: Path, backend: BackendClient) -> Probed:
    return probe(backend, _config(server, demo_gguf))


@pytest.fixture
def runner(backend: BackendClient, probed: Probed) -> JobRunner:
    return JobRunner(backend, HordeClient("http://127.0.0.1:9", "unused"), probed, 60)


def _chat(payload: dict[str, Any], stream: bool = False) -> Job:
    return Job("job", {"max_tokens": 300, **payload}, is_chat=True, stream=stream, ttl=None)


def test_probe_declares_the_exact_counter_and_what_the_grammar_enforces(probed: Probed) -> None:
    assert probed.kind.name == "llama-cpp-python"
    assert probed.model_id == MODEL_NAME
    assert probed.counter.kind == "exact"
    assert probed.calibration.probe_count == probed.calibration.probe_usage
    features = set(probed.features)
    assert {FEATURE_TOOLS, FEATURE_JSON_SCHEMA, GUARANTEE_JSON_SCHEMA_ENFORCED} <= features
    assert GUARANTEE_PROMPT_OVERFLOW_REFUSED in features
    # llama-cpp-python ignores `required` among several tools: the worker's grammar forces it
    assert GUARANTEE_TOOL_CHOICE_REQUIRED_ENFORCED in features


def test_demo_worker_declares_json_output_and_the_forced_tool_because_its_probes_pass(
    probed: Probed,
) -> None:
    # The demo model closes grammar-constrained output at once, so the json_object probe
    # parses, the schema probe validates and the forced call (a named function on
    # llama-cpp-python) comes back; the tool-result turn is answered.
    features = set(probed.features)
    assert {
        FEATURE_JSON_OBJECT,
        FEATURE_JSON_SCHEMA,
        GUARANTEE_JSON_OUTPUT_ENFORCED,
        GUARANTEE_JSON_SCHEMA_ENFORCED,
        FEATURE_TOOLS,
        GUARANTEE_TOOL_CHOICE_ENFORCED,
    } <= features
    assert not [note for note in probed.notes if "tool-result" in note]


@pytest.mark.parametrize(
    "messages",
    [
        PROBE_MESSAGES,
        [{"role": "user", "content": "x" * 500}],
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            }
        ],
    ],
)
def test_exact_counter_equals_usage_prompt_tokens(
    probed: Probed, backend: BackendClient, messages: list[dict[str, Any]]
) -> None:
    shaped = backend_messages(probed.kind, messages)
    assert probed.counter.count(shaped, None) == prompt_tokens_of(backend, MODEL_NAME, shaped)


def test_chat_job_gets_the_demo_reply_with_the_backends_usage(runner: JobRunner) -> None:
    reply = runner.chat_reply(_chat({"messages": PROBE_MESSAGES}), None)
    assert reply is not None
    assert (reply.content, reply.finish_reason, reply.tool_calls) == (DEMO_REPLY, "stop", [])
    assert reply.usage["prompt_tokens"] == runner.probed.counter.count(PROBE_MESSAGES, None)
    assert reply.usage["completion_tokens"]
    assert reply.usage["completion_tokens"] > 0


def test_forced_tool_choice_is_a_structured_call(runner: JobRunner) -> None:
    # Dispatch sends a named tool_choice as that one function under "required".
    payload = {"messages": PROBE_MESSAGES, "tools": [UNIT_TOOL], "tool_choice": "required"}
    reply = runner.chat_reply(_chat(payload), None)
    assert reply is not None
    assert reply.finish_reason == "tool_calls"
    assert reply.content is None
    assert len(reply.tool_calls) == 1
    call = reply.tool_calls[0]
    assert call["function"]["name"] == "get_weather"
    assert call["id"].startswith("call_")
    assert json.loads(call["function"]["arguments"])["unit"] in ("celsius", "fahrenheit")


def test_required_among_several_tools_is_one_structured_call(runner: JobRunner) -> None:
    # llama-cpp-python ignores "required": the worker sends a grammar allowing one call to
    # any of the tools (LangChain's tool_choice "any", a pydantic-ai agent with tools and an
    # output type) and turns the content it forces back into that call.
    second = {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"type": "string"}},
                "required": ["zone"],
            },
        },
    }
    tools = [UNIT_TOOL, second]
    payload = {"messages": PROBE_MESSAGES, "tools": tools, "tool_choice": "required"}
    reply = runner.chat_reply(_chat(payload), None)
    assert reply is not None
    assert (reply.finish_reason, reply.content) == ("tool_calls", None)
    (call,) = reply.tool_calls
    assert call["id"].startswith("call_")
    arguments = json.loads(call["function"]["arguments"])
    if call["function"]["name"] == "get_weather":
        assert arguments["unit"] in ("celsius", "fahrenheit")
    else:
        assert call["function"]["name"] == "get_time"
        assert isinstance(arguments["zone"], str)


def test_a_tool_loops_second_turn_with_content_null_is_answered(runner: JobRunner) -> None:
    # The OpenAI SDK sends the assistant's call back with content None; llama-cpp-python
    # refuses that with a 500 unless the worker's mapping sends "".
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"unit": "celsius"}'},
    }
    messages = [
        *PROBE_MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "20 degrees"},
    ]
    reply = runner.chat_reply(_chat({"messages": messages, "tools": [UNIT_TOOL]}), None)
    assert reply is not None
    assert (reply.content, reply.finish_reason, reply.tool_calls) == (DEMO_REPLY, "stop", [])


def test_streamed_job_posts_the_demo_reply_through_the_progress_seam(runner: JobRunner) -> None:
    posted: list[str] = []
    reply = runner.chat_reply(
        _chat({"messages": PROBE_MESSAGES}, stream=True), lambda d: posted.append(d) or False
    )
    assert reply is not None
    assert reply.content == DEMO_REPLY
    assert reply.finish_reason == "stop"
    assert "".join(posted) == DEMO_REPLY


def test_overflowing_conversation_is_faulted_never_trimmed(runner: JobRunner) -> None:
    messages = [{"role": "user", "content": "x" * (CONTEXT * 4)}]
    with pytest.raises(PromptOverflow, match="exact"):
        runner.chat_reply(_chat({"messages": messages, "max_tokens": 16}), None)


def test_a_text_job_is_served_through_the_native_api(
    server: LlamaServer,
    demo_gguf: Path,
    native_service: Any,
    native_client: httpx.Client,
    make_user: Callable[..., MadeUser],
) -> None:
    from runtime.worker.cli import RunningWorker

    requester, owner = make_user("req", kudos=100), make_user("owner")
    request_id = submit_text(
        native_client, requester.api_key, max_length=16, max_context_length=CONTEXT
    )
    config = _config(
        server, demo_gguf, horde=native_service.url, api_key=owner.api_key, poll_interval=0.05
    )
    worker = RunningWorker.start(config)
    try:
        waited = threading.Event()
        while not status(native_client, request_id)["done"]:
            assert not waited.wait(0.05), "the job was not served"
            assert worker.loop.served < 3, "the job was not served"
    finally:
        worker.stop(grace=5)
    generations = status(native_client, request_id)["generations"]
    assert len(generations) == 1
    assert generations[0]["state"] == "ok"
    assert generations[0]["model"] == MODEL_NAME


def test_a_chat_job_end_to_end_through_the_native_api(
    server: LlamaServer,
    demo_gguf: Path,
    native_service: Any,
    native_client: httpx.Client,
    make_user: Callable[..., MadeUser],
) -> None:
    from runtime.worker.cli import RunningWorker

    requester, owner = make_user("req", kudos=100), make_user("owner")
    config = _config(
        server, demo_gguf, horde=native_service.url, api_key=owner.api_key, poll_interval=0.05
    )
    worker = RunningWorker.start(config)
    try:
        waited = threading.Event()
        until_listed(native_client)
        body = {"model": MODEL_NAME, "messages": PROBE_MESSAGES, "max_tokens": 64}
        response = chat_async(native_client, requester.api_key, body)
        assert response.status_code == 202, response.text
        request_id = response.json()["id"]
        while not chat_status(native_client, request_id)["done"]:
            assert not waited.wait(0.05), "the job was not served"
            assert worker.loop.served < 3, "the job was not served"
        counted = worker.probed.counter.count(PROBE_MESSAGES, None)
    finally:
        worker.stop(grace=5)
    generation = chat_status(native_client, request_id)["generations"][0]
    assert (generation["content"], generation["finish_reason"]) == (DEMO_REPLY, "stop")
    assert generation["model"] == MODEL_NAME
    assert generation["tool_calls"] == []
    assert generation["usage"]["prompt_tokens"] == counted


FIT_CASES: list[list[dict[str, Any]]] = [
    PROBE_MESSAGES,
    [{"role": "user", "content": "x" * 500}],
    [{"role": "user", "content": "日本語 🙂 ünïcödé " * 20}],
    [{"role": "user", "content": DEMO_REPLY * 8}],
]


@pytest.mark.parametrize("messages", FIT_CASES)
@pytest.mark.parametrize("tools", [None, [UNIT_TOOL]])
def test_the_byte_bound_is_never_under_the_backends_count(
    probed: Probed,
    backend: BackendClient,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
) -> None:
    counter = probed.counter
    assert isinstance(counter, BoundedCounter)  # the demo model's tokenizer is gpt2's BPE
    shaped = backend_messages(probed.kind, messages)
    bound = counter.upper_bound(shaped, tools)
    assert bound is not None
    assert bound >= counter.count(shaped, tools)


def _count_calls(backend: BackendClient, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The backend routes asked from now on (the counter's client is ``backend``)."""
    asked: list[str] = []
    request_json = backend.request_json

    def recording(method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        asked.append(path)
        return request_json(method, path, body, **kwargs)

    monkeypatch.setattr(backend, "request_json", recording)
    return asked


def test_a_job_whose_bound_fits_is_not_counted_by_the_backend(
    runner: JobRunner, backend: BackendClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _count_calls(backend, monkeypatch)
    reply = runner.chat_reply(_chat({"messages": PROBE_MESSAGES}), None)
    assert reply is not None
    assert reply.content == DEMO_REPLY
    assert not [path for path in asked if "tokenize" in path]


def test_a_job_near_the_context_and_a_streamed_job_are_counted_exactly(
    runner: JobRunner, backend: BackendClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = runner.probed.counter
    assert isinstance(counter, BoundedCounter)
    max_tokens = 300
    # the demo reply's words are single tokens of the demo tokenizer, many bytes each: the
    # byte bound says this does not fit, the backend's count that it does
    messages = [{"role": "user", "content": DEMO_REPLY * 10}]
    bound = counter.upper_bound(messages, None)
    assert bound is not None
    assert bound + max_tokens > CONTEXT >= counter.count(messages, None) + max_tokens
    asked = _count_calls(backend, monkeypatch)
    reply = runner.chat_reply(_chat({"messages": messages, "max_tokens": max_tokens}), None)
    assert reply is not None
    assert reply.content == DEMO_REPLY
    assert [path for path in asked if "tokenize" in path]
    asked.clear()
    streamed = runner.chat_reply(_chat({"messages": PROBE_MESSAGES}, stream=True), lambda d: False)
    assert streamed is not None
    assert streamed.usage["prompt_tokens"] == counter.count(PROBE_MESSAGES, None)
    assert [path for path in asked if "tokenize" in path]


def test_a_tokenizer_that_may_expand_its_text_has_no_byte_bound(
    backend: BackendClient, demo_gguf: Path
) -> None:
    template = ModelTemplate.from_gguf(demo_gguf)
    assert template is not None
    assert template.tokenizer_model == "gpt2"
    unigram = TemplateCounter(
        backend, "/extras/tokenize/count", replace(template, tokenizer_model="t5")
    )
    assert unigram.upper_bound(PROBE_MESSAGES, None) is None
