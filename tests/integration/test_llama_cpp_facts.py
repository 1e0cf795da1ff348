"""What llama-cpp-python's server really does, checked against the real server and demo model.

The chat worker is built on these facts: the exact prompt counter, streaming
without usage, grammar-forced tool calls, and which response_format shapes the backend takes.
Content is asserted only where the demo model or a grammar determines it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
from openai import OpenAI

from runtime.worker.llama_server import LlamaServer
from runtime.worker.tiny_model import (
    CHATML_TEMPLATE,
    DEMO_REPLY,
    ENDOFTEXT,
    IM_END,
    MODEL_NAME,
    build_tiny_model,
    train_tokenizer,
)

pytestmark = pytest.mark.integration

PROBE = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Wie spät ist es? 日本語で 🙂"},
    {"role": "assistant", "content": "Keine Ahnung."},
    {"role": "user", "content": "Then tell me who you are."},
]
UNIT_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a unit",
        "parameters": {
            "type": "object",
            "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["unit"],
            "additionalProperties": False,
        },
    },
}
FLAG_SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}
CONTEXT = 1024
# Room for a grammar-constrained reply (the demo model closes one within a few dozen tokens).
GRAMMAR_MAX_TOKENS = 300


def _start(model: Path) -> Iterator[LlamaServer]:
    with LlamaServer(model, n_ctx=CONTEXT) as server:
        yield server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    yield from _start(build_tiny_model(tmp_path_factory.mktemp("models") / "demo.gguf"))


@pytest.fixture(scope="module")
def bos_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    path = tmp_path_factory.mktemp("models") / "demo-bos.gguf"
    yield from _start(build_tiny_model(path, add_bos_token=True))


@pytest.fixture
def client(server: LlamaServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.openai_base_url, api_key="unused", max_retries=0) as sdk:
        yield sdk


def _rendered(messages: list[dict[str, str]]) -> str:
    formatter = Jinja2ChatFormatter(CHATML_TEMPLATE, eos_token=IM_END, bos_token=ENDOFTEXT)
    return formatter(messages=messages).prompt  # type: ignore[arg-type]


def _count(server: LlamaServer, text: str) -> int:
    response = httpx.post(f"{server.base_url}/extras/tokenize/count", json={"input": text})
    response.raise_for_status()
    return int(response.json()["count"])


def _prompt_tokens(server: LlamaServer, messages: list[dict[str, str]]) -> int:
    body = {"model": MODEL_NAME, "messages": messages, "max_tokens": 4}
    response = httpx.post(f"{server.openai_base_url}/chat/completions", json=body, timeout=30)
    response.raise_for_status()
    return int(response.json()["usage"]["prompt_tokens"])


def test_models_route_lists_the_alias(client: OpenAI) -> None:
    assert [model.id for model in client.models.list()] == [MODEL_NAME]


def test_chat_completion_is_exactly_the_demo_reply(client: OpenAI) -> None:
    completion = client.chat.completions.create(model=MODEL_NAME, messages=PROBE)  # type: ignore[arg-type]
    choice = completion.choices[0]
    assert choice.message.content == DEMO_REPLY
    assert choice.finish_reason == "stop"
    assert choice.message.tool_calls is None
    assert completion.usage is not None
    # The end-of-turn token that stopped generation is not counted.
    assert completion.usage.completion_tokens == len(train_tokenizer().encode(DEMO_REPLY).ids)


def test_response_model_echoes_whatever_the_request_named(client: OpenAI) -> None:
    completion = client.chat.completions.create(model="no-such-model", messages=PROBE)  # type: ignore[arg-type]
    assert completion.model == "no-such-model"
    assert completion.choices[0].message.content == DEMO_REPLY


def test_max_tokens_cuts_the_reply_with_finish_reason_length(client: OpenAI) -> None:
    completion = client.chat.completions.create(model=MODEL_NAME, messages=PROBE, max_tokens=3)  # type: ignore[arg-type]
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 3
    assert DEMO_REPLY.startswith(completion.choices[0].message.content or "")


def test_stream_yields_the_same_text_and_never_a_usage_chunk(client: OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL_NAME,
        messages=PROBE,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(chunk.usage is None for chunk in chunks)  # include_usage is ignored
    assert all(len(chunk.choices) == 1 for chunk in chunks)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert text == DEMO_REPLY
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["stop"]


def test_counter_from_template_render_equals_usage_prompt_tokens(server: LlamaServer) -> None:
    for messages in (PROBE[:2], PROBE, [{"role": "user", "content": "x" * 700}]):
        assert _count(server, _rendered(messages)) == _prompt_tokens(server, messages)


def test_bos_model_count_route_adds_bos_while_the_chat_path_does_not(
    bos_server: LlamaServer,
) -> None:
    rendered = _rendered(PROBE)
    assert _count(bos_server, rendered) == _prompt_tokens(bos_server, PROBE) + 1
    tokens = httpx.post(f"{bos_server.base_url}/extras/tokenize", json={"input": "hi"}).json()
    assert tokens["tokens"][0] == train_tokenizer().token_to_id(ENDOFTEXT)


def test_control_token_text_in_content_is_parsed_as_a_control_token(server: LlamaServer) -> None:
    injected = [{"role": "user", "content": f"a{IM_END}b"}]
    rendered = _rendered(injected)
    response = httpx.post(f"{server.base_url}/extras/tokenize", json={"input": rendered})
    im_end = train_tokenizer().token_to_id(IM_END)
    assert response.json()["tokens"].count(im_end) == 2  # the template's and the user's
    assert _prompt_tokens(server, injected) == _count(server, rendered)


def test_named_tool_choice_is_forced_by_grammar(client: OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL_NAME,
        messages=PROBE,  # type: ignore[arg-type]
        tools=[UNIT_TOOL],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=GRAMMAR_MAX_TOKENS,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.tool_calls is not None
    assert len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert call.id.startswith("call_")
    assert json.loads(call.function.arguments)["unit"] in ("celsius", "fahrenheit")  # type: ignore[union-attr]


def test_named_tool_choice_streams_argument_deltas(client: OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL_NAME,
        messages=PROBE,  # type: ignore[arg-type]
        tools=[UNIT_TOOL],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=GRAMMAR_MAX_TOKENS,
        stream=True,
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta.tool_calls for c in chunks if c.choices[0].delta.tool_calls]
    arguments = "".join(d[0].function.arguments or "" for d in deltas if d[0].function)
    assert json.loads(arguments)["unit"] in ("celsius", "fahrenheit")
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("tool_choice", ["auto", "required"])
def test_unnamed_tool_choice_is_not_enforced(client: OpenAI, tool_choice: str) -> None:
    completion = client.chat.completions.create(
        model=MODEL_NAME,
        messages=PROBE,  # type: ignore[arg-type]
        tools=[UNIT_TOOL],  # type: ignore[list-item]
        tool_choice=tool_choice,  # type: ignore[arg-type]
    )
    choice = completion.choices[0]
    assert choice.message.tool_calls is None
    assert choice.message.content == DEMO_REPLY


def test_json_object_with_schema_constrains_the_content(server: LlamaServer) -> None:
    body = {
        "model": MODEL_NAME,
        "messages": PROBE,
        "response_format": {"type": "json_object", "schema": FLAG_SCHEMA},
        "max_tokens": GRAMMAR_MAX_TOKENS,
    }
    response = httpx.post(f"{server.openai_base_url}/chat/completions", json=body, timeout=60)
    assert response.status_code == 200
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert isinstance(json.loads(choice["message"]["content"])["ok"], bool)


def test_json_schema_response_format_is_refused_with_500(server: LlamaServer) -> None:
    body = {
        "model": MODEL_NAME,
        "messages": PROBE,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "flag", "schema": FLAG_SCHEMA, "strict": True},
        },
    }
    response = httpx.post(f"{server.openai_base_url}/chat/completions", json=body, timeout=30)
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["type"] == "internal_server_error"
    assert "response_format" in error["message"]


CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"unit": "celsius"}'},
}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "20 degrees"}


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "assistant", "content": [{"type": "text", "text": "x"}], "tool_calls": [CALL]},
    ],
    ids=["content-null", "content-parts"],
)
def test_assistant_content_null_or_parts_is_refused_with_500(
    server: LlamaServer, message: dict[str, object]
) -> None:
    # What the OpenAI SDK, LangChain and openai-agents send back on a tool loop's second turn.
    body = {"model": MODEL_NAME, "messages": [PROBE[1], message, RESULT], "tools": [UNIT_TOOL]}
    response = httpx.post(f"{server.openai_base_url}/chat/completions", json=body, timeout=30)
    assert response.status_code == 500
    assert "validation error" in response.json()["error"]["message"]


@pytest.mark.parametrize("content", ["", "absent"])
def test_assistant_content_empty_or_absent_beside_tool_calls_is_answered(
    server: LlamaServer, content: str
) -> None:
    message = {"role": "assistant", "tool_calls": [CALL]}
    if content != "absent":
        message["content"] = content
    body = {"model": MODEL_NAME, "messages": [PROBE[1], message, RESULT], "tools": [UNIT_TOOL]}
    response = httpx.post(f"{server.openai_base_url}/chat/completions", json=body, timeout=30)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == DEMO_REPLY


def test_unknown_fields_and_n_above_one_are_silently_accepted(server: LlamaServer) -> None:
    body = {"model": MODEL_NAME, "messages": PROBE, "n": 2, "no_such_field": True}
    response = httpx.post(f"{server.openai_base_url}/chat/completions", json=body, timeout=30)
    assert response.status_code == 200
    assert len(response.json()["choices"]) == 1


def _long_conversation(
    server: LlamaServer, low: int, high: int
) -> tuple[list[dict[str, str]], int]:
    """A conversation whose prompt is between low and high tokens, with its exact count."""
    for length in range(low, high):
        messages = [{"role": "user", "content": "x" * length}]
        count = _count(server, _rendered(messages))
        if low < count < high:
            return messages, count
    raise AssertionError(f"no conversation of {low}..{high} tokens")


def test_prompt_over_the_context_is_refused_with_400_not_trimmed(server: LlamaServer) -> None:
    messages, _ = _long_conversation(server, CONTEXT + 10, CONTEXT + 100)
    body = {"model": MODEL_NAME, "messages": messages}
    response = httpx.post(f"{server.openai_base_url}/chat/completions", json=body, timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", "messages")


def test_streamed_prompt_over_the_context_gets_200_and_no_event(server: LlamaServer) -> None:
    messages, _ = _long_conversation(server, CONTEXT + 10, CONTEXT + 100)
    body = {"model": MODEL_NAME, "messages": messages, "stream": True}
    received = b""
    with httpx.Client(timeout=30) as client:
        url = f"{server.openai_base_url}/chat/completions"
        with client.stream("POST", url, json=body) as response:
            assert response.status_code == 200
            try:
                for part in response.iter_bytes():
                    received += part
            except httpx.RemoteProtocolError:
                pass  # the server drops the connection after the headers
    assert b"data:" not in received


def test_max_tokens_is_silently_cut_to_what_the_context_has_left(server: LlamaServer) -> None:
    reply_tokens = len(train_tokenizer().encode(DEMO_REPLY).ids)
    messages, prompt = _long_conversation(server, CONTEXT - reply_tokens, CONTEXT)
    body = {"model": MODEL_NAME, "messages": messages, "max_tokens": 100}
    response = httpx.post(f"{server.openai_base_url}/chat/completions", json=body, timeout=30)
    assert response.status_code == 200
    assert response.json()["usage"]["completion_tokens"] == CONTEXT - prompt
    assert response.json()["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("max_tokens", [0, -1])
def test_max_tokens_zero_or_negative_means_unlimited(server: LlamaServer, max_tokens: int) -> None:
    body = {"model": MODEL_NAME, "messages": PROBE, "max_tokens": max_tokens}
    response = httpx.post(f"{server.openai_base_url}/chat/completions", json=body, timeout=30)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == DEMO_REPLY
