"""The OpenAI-compatible backend double, driven by the official openai SDK as a client."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import OpenAI

from tests.doubles.backend_script import Failure, Hang, Reply, render_chatml
from tests.doubles.openai_backend import COUNT_ROUTE, MODELS_ROUTE, OpenAIBackendDouble

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Grüß dich"}]},
]


@pytest.fixture
def backend() -> Iterator[OpenAIBackendDouble]:
    with OpenAIBackendDouble(model="tiny", model_fields={"max_model_len": 4096}) as double:
        yield double


@pytest.fixture
def client(backend: OpenAIBackendDouble) -> Iterator[OpenAI]:
    with OpenAI(base_url=backend.openai_base_url, api_key="k", max_retries=0, timeout=10) as sdk:
        yield sdk


def _chat(client: OpenAI, **extra: object) -> object:
    return client.chat.completions.create(model="tiny", messages=MESSAGES, **extra)  # type: ignore[call-overload]


def test_models_route_lists_the_model_with_extra_fields(client: OpenAI) -> None:
    (model,) = client.models.list()
    assert model.id == "tiny"
    assert model.to_dict()["max_model_len"] == 4096


def test_scripted_replies_come_in_order_and_requests_are_recorded(
    backend: OpenAIBackendDouble, client: OpenAI
) -> None:
    backend.script(Reply(content="first"), Reply(content="second", reasoning_content="hmm"))
    first = client.chat.completions.create(model="tiny", messages=MESSAGES, temperature=0.5)  # type: ignore[arg-type]
    second = _chat(client)
    assert first.choices[0].message.content == "first"
    assert second.choices[0].message.content == "second"  # type: ignore[attr-defined]
    assert second.choices[0].message.to_dict()["reasoning_content"] == "hmm"  # type: ignore[attr-defined]
    assert first.choices[0].finish_reason == "stop"
    assert first.usage is not None
    assert first.usage.prompt_tokens == len(render_chatml(MESSAGES).encode())
    assert first.usage.completion_tokens == len(b"first")
    recorded = backend.chat_requests()
    assert recorded[0].body["temperature"] == 0.5
    assert "temperature" not in recorded[1].body
    assert recorded[0].body["messages"] == MESSAGES
    assert recorded[0].headers["authorization"] == "Bearer k"
    assert backend.pending() == 0


def test_without_script_or_default_the_chat_route_says_so(client: OpenAI) -> None:
    with pytest.raises(openai.InternalServerError, match="no scripted reply"):
        _chat(client)


def test_default_reply_answers_when_the_script_is_empty() -> None:
    with (
        OpenAIBackendDouble(default_reply=Reply(content="always")) as backend,
        OpenAI(base_url=backend.openai_base_url, api_key="k", max_retries=0) as sdk,
    ):
        for _ in range(2):
            reply = sdk.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
            assert reply.choices[0].message.content == "always"


def test_stream_with_usage_chunk(backend: OpenAIBackendDouble, client: OpenAI) -> None:
    backend.script(Reply(content="one two three", prompt_tokens=7, completion_tokens=3))
    chunks = list(_chat(client, stream=True, stream_options={"include_usage": True}))  # type: ignore[call-overload]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 3
    assert chunks[-1].choices == []
    assert chunks[-1].usage.prompt_tokens == 7
    assert chunks[-2].choices[0].finish_reason == "stop"


def test_stream_usage_can_be_ignored_like_llama_cpp_python() -> None:
    with (
        OpenAIBackendDouble(stream_usage=False, default_reply=Reply(content="a b")) as backend,
        OpenAI(base_url=backend.openai_base_url, api_key="k", max_retries=0) as sdk,
    ):
        stream = sdk.chat.completions.create(
            model="m",
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
        assert all(chunk.usage is None and chunk.choices for chunk in stream)


def test_tool_calls_json_and_streamed(backend: OpenAIBackendDouble, client: OpenAI) -> None:
    call = {"name": "get_weather", "arguments": '{"unit": "celsius"}'}
    backend.script(Reply(content=None, tool_calls=[call]), Reply(content=None, tool_calls=[call]))
    reply = _chat(client)
    (tool_call,) = reply.choices[0].message.tool_calls  # type: ignore[attr-defined]
    assert (tool_call.function.name, tool_call.function.arguments) == (
        call["name"],
        call["arguments"],
    )
    assert reply.choices[0].finish_reason == "tool_calls"  # type: ignore[attr-defined]
    chunks = list(_chat(client, stream=True))  # type: ignore[call-overload]
    streamed = [c.choices[0].delta.tool_calls for c in chunks if c.choices[0].delta.tool_calls]
    assert json.loads(streamed[0][0].function.arguments) == {"unit": "celsius"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, openai.BadRequestError),
        (503, openai.InternalServerError),
        (429, openai.RateLimitError),
    ],
)
def test_scripted_failures_reach_the_client(
    backend: OpenAIBackendDouble, client: OpenAI, status: int, error: type[Exception]
) -> None:
    backend.script(Failure(status=status, message=f"scripted {status}"))
    with pytest.raises(error, match=f"scripted {status}"):
        _chat(client)


def test_sdk_retries_are_visible_in_the_recorded_requests(backend: OpenAIBackendDouble) -> None:
    fast_retry = {"retry-after-ms": "10"}
    backend.script(
        Failure(status=503, headers=fast_retry),
        Failure(status=503, headers=fast_retry),
        Reply(content="third time"),
    )
    with OpenAI(base_url=backend.openai_base_url, api_key="k", max_retries=2) as sdk:
        reply = sdk.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "third time"
    assert len(backend.chat_requests()) == 3


def test_hang_and_delay_make_the_client_time_out(backend: OpenAIBackendDouble) -> None:
    backend.script(Hang(), Reply(content="late", delay=30))
    with OpenAI(base_url=backend.openai_base_url, api_key="k", max_retries=0, timeout=0.3) as sdk:
        for _ in range(2):
            with pytest.raises(openai.APITimeoutError):
                sdk.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    assert len(backend.chat_requests()) == 2


def test_stream_error_event_raises_in_the_sdk_after_partial_text(
    backend: OpenAIBackendDouble, client: OpenAI
) -> None:
    backend.script(Reply(content="one two three", stream_error_after=1))
    received: list[str] = []
    with pytest.raises(openai.APIError, match="scripted stream failure"):  # noqa: PT012 (raised mid-iteration)
        for chunk in _chat(client, stream=True):  # type: ignore[attr-defined]
            received.append(chunk.choices[0].delta.content or "")
    assert "".join(received) == "one"


def test_tokenize_count_route_and_prompt_offset() -> None:
    with OpenAIBackendDouble(prompt_tokens_offset=3, default_reply=Reply()) as backend:
        rendered = render_chatml(MESSAGES)
        count = httpx.post(f"{backend.base_url}{COUNT_ROUTE}", json={"input": rendered}).json()
        assert count == {"count": len(rendered.encode())}
        body = {"model": "m", "messages": MESSAGES}
        reply = httpx.post(f"{backend.openai_base_url}/chat/completions", json=body).json()
        assert reply["usage"]["prompt_tokens"] == count["count"] + 3
        bad = httpx.post(f"{backend.base_url}{COUNT_ROUTE}", json={"input": 5})
        assert bad.status_code == 422


def test_routes_can_be_scripted_or_absent() -> None:
    with OpenAIBackendDouble(tokenize_route=False) as backend:
        backend.script(Failure(status=502, message="models down"), route=MODELS_ROUTE)
        assert httpx.get(f"{backend.openai_base_url}/models").status_code == 502
        assert httpx.get(f"{backend.openai_base_url}/models").status_code == 200
        count = httpx.post(f"{backend.base_url}{COUNT_ROUTE}", json={"input": "x"})
        assert count.status_code == 404


def test_strict_model_refuses_other_names() -> None:
    with (
        OpenAIBackendDouble(model="tiny", strict_model=True, default_reply=Reply()) as backend,
        OpenAI(base_url=backend.openai_base_url, api_key="k", max_retries=0) as sdk,
    ):
        with pytest.raises(openai.NotFoundError):
            sdk.chat.completions.create(model="other", messages=MESSAGES)  # type: ignore[arg-type]
        assert sdk.chat.completions.create(model="tiny", messages=MESSAGES).model == "tiny"  # type: ignore[arg-type]
