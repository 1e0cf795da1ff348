"""The front's own logic against a scripted native double (real HTTP, real Redis).

Each test drives the front with the official openai SDK (or httpx where the SDK would
hide what is checked) and asserts the outcome, the headers, what the native side received
(submits, cancels, status reads), and that every body is valid under OpenAI's schema. The
end-to-end flows through the real native API and a worker are in tests/e2e/.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from generated.signals import chat_channel
from runtime.stores.embedded import EmbeddedStores
from tests.doubles.native_chat_double import NativeChatDouble
from tests.support.front import running_front
from tests.support.openai_schema import assert_chunk, assert_completion, assert_error

pytestmark = pytest.mark.integration

PASSKEY = "front-test-passkey"
MESSAGES = [{"role": "user", "content": "Say hello"}]
FAST = {"poll_interval": 0.3, "grace": 1.0, "deadline": 3.0, "queue_info_wait": 0.5}


@pytest.fixture
def native(horde_stores: EmbeddedStores) -> Iterator[NativeChatDouble]:
    with NativeChatDouble(horde_stores.redis_url, chat_channel) as double:
        yield double


@pytest.fixture
def front_url(horde_stores: EmbeddedStores, native: NativeChatDouble) -> Iterator[str]:
    with running_front(
        horde_stores.redis_url,
        [native.root],
        service_passkey=PASSKEY,
        submit_timeout=1.0,
        **FAST,
    ) as front:
        yield front.url


@pytest.fixture
def client(front_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=front_url + "/v1", api_key="key-1", max_retries=2) as sdk:
        yield sdk


def answer_later(native: NativeChatDouble, **finish: Any) -> threading.Thread:
    def run() -> None:
        native.finish(native.wait_for_submit(), **finish)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_plain_completion_forwards_key_passkey_source_and_operation_key(
    native: NativeChatDouble, client: openai.OpenAI
) -> None:
    answer_later(native, content="Hello there.")
    raw = client.chat.completions.with_raw_response.create(
        model="double-model", messages=MESSAGES, logprobs=False, store=False
    )
    body = json.loads(raw.content)
    assert_completion(body)
    assert body["id"] == "chatcmpl-req1"
    assert body["choices"][0]["message"]["content"] == "Hello there."
    assert body["x_horde"] == {
        "request_id": "req1",
        "kudos": 7.0,
        "charge_basis": "output_estimate",
        "estimated_usage": False,
    }
    assert body["usage"] == {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
    (submit,) = native.submits
    assert submit.headers["apikey"] == "key-1"
    assert submit.headers["x-horde-service-passkey"] == PASSKEY
    assert submit.headers["x-forwarded-for"] == "127.0.0.1"
    assert len(submit.headers["x-operation-key"]) >= 16
    sent = json.loads(submit.body)
    assert "logprobs" not in sent and "store" not in sent  # the front's default no-ops
    assert native.cancels == []


def test_async_sdk_and_missing_counts_are_estimated(
    native: NativeChatDouble, front_url: str
) -> None:
    answer_later(native, content="abcdef", usage={}, reasoning_content="think")

    async def call() -> Any:
        client = openai.AsyncOpenAI(base_url=front_url + "/v1", api_key="k")
        async with client:
            return await client.chat.completions.create(model="m", messages=MESSAGES)

    completion = asyncio.run(call())
    assert_completion(completion.model_dump(exclude_unset=True))
    extra = completion.model_extra or {}
    assert extra["x_horde"]["estimated_usage"] is True
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 4  # 11 characters over 3 per token
    assert completion.choices[0].message.model_extra["reasoning_content"] == "think"


def test_include_reasoning_false_leaves_reasoning_out(
    native: NativeChatDouble, client: openai.OpenAI
) -> None:
    answer_later(native, reasoning_content="secret thoughts")
    completion = client.chat.completions.create(
        model="m", messages=MESSAGES, extra_body={"horde": {"include_reasoning": False}}
    )
    assert "reasoning_content" not in (completion.choices[0].message.model_extra or {})


def test_whole_reply_stream_with_tool_calls_and_usage(
    native: NativeChatDouble, front_url: str
) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    answer_later(native, content=None, tool_calls=[call], finish_reason="tool_calls")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with httpx.stream(
        "POST",
        front_url + "/v1/chat/completions",
        json={
            "model": "m",
            "messages": MESSAGES,
            "tools": tools,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        timeout=10,
    ) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    for chunk in chunks:
        assert_chunk(chunk)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-3]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "f"
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 14
    assert all(c["usage"] is None for c in chunks[:-1])
    assert {c["id"] for c in chunks} == {"chatcmpl-req1"}


def test_sdk_stream_accumulates_the_whole_reply(
    native: NativeChatDouble, client: openai.OpenAI
) -> None:
    answer_later(native, content="Streamed whole.")
    stream = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "Streamed whole."


def refused(call: Any) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as info:
        call()
    assert_error(info.value.response.json())
    return info.value


def test_deadline_is_408_not_retried_and_cancels(
    native: NativeChatDouble, client: openai.OpenAI
) -> None:
    error = refused(lambda: client.chat.completions.create(model="m", messages=MESSAGES))
    assert error.status_code == 408
    assert error.body["code"] == "deadline_exceeded"  # type: ignore[index]
    assert error.response.headers["x-should-retry"] == "false"
    assert len(native.submits) == 1  # the SDK did not retry a submitted request
    assert native.cancels == ["req1"]


def test_grace_without_a_possible_worker_is_503_and_cancels(
    native: NativeChatDouble, client: openai.OpenAI
) -> None:
    native.initial = {"is_possible": False}
    error = refused(lambda: client.chat.completions.create(model="m", messages=MESSAGES))
    assert isinstance(error, openai.InternalServerError)
    assert (error.status_code, error.body["code"]) == (503, "no_eligible_worker")  # type: ignore[index]
    assert error.response.headers["x-should-retry"] == "false"
    assert len(native.submits) == 1 and native.cancels == ["req1"]


def test_faulted_is_502_and_not_cancelled(native: NativeChatDouble, client: openai.OpenAI) -> None:
    def fault() -> None:
        native.update(native.wait_for_submit(), faulted=True)

    threading.Thread(target=fault, daemon=True).start()
    error = refused(lambda: client.chat.completions.create(model="m", messages=MESSAGES))
    assert (error.status_code, error.body["code"]) == (502, "ChatRequestFaulted")  # type: ignore[index]
    assert len(native.submits) == 1 and native.cancels == []


def test_done_without_a_generation_is_502_and_cancels(
    native: NativeChatDouble, client: openai.OpenAI
) -> None:
    def end() -> None:
        native.update(native.wait_for_submit(), done=True)

    threading.Thread(target=end, daemon=True).start()
    error = refused(lambda: client.chat.completions.create(model="m", messages=MESSAGES))
    assert (error.status_code, error.body["code"]) == (502, "no_generation")  # type: ignore[index]
    assert native.cancels == ["req1"]


@pytest.mark.parametrize("stream", [False, True])
def test_declaration_gap_is_404_before_any_stream(
    native: NativeChatDouble, client: openai.OpenAI, stream: bool
) -> None:
    native.initial = {"missing_features": ["tools", "tool_choice_enforced"]}
    error = refused(
        lambda: client.chat.completions.create(model="m", messages=MESSAGES, stream=stream)
    )
    assert isinstance(error, openai.NotFoundError)
    assert error.body["code"] == "no_worker_supports_features"  # type: ignore[index]
    assert "tool_choice_enforced" in error.message
    assert native.cancels == ["req1"]


def test_limits_gap_is_400(native: NativeChatDouble, client: openai.OpenAI) -> None:
    native.initial = {
        "exceeded_limits": [{"limit": "max_context_length", "value": 9000, "maximum": 4096}]
    }
    error = refused(lambda: client.chat.completions.create(model="m", messages=MESSAGES))
    assert isinstance(error, openai.BadRequestError)
    assert error.body["code"] == "no_worker_supports_limit"  # type: ignore[index]
    assert error.response.headers["x-should-retry"] == "false"


@pytest.mark.parametrize("stream", [False, True])
def test_fail_fast_without_threads_is_queue_unavailable(
    native: NativeChatDouble, client: openai.OpenAI, stream: bool
) -> None:
    native.initial = {"eligible_threads": 0}
    error = refused(
        lambda: client.chat.completions.create(
            model="m",
            messages=MESSAGES,
            stream=stream,
            extra_body={"horde": {"availability_mode": "fail_fast"}},
        )
    )
    assert (error.status_code, error.body["code"]) == (503, "queue_unavailable")  # type: ignore[index]
    assert int(error.response.headers["retry-after"]) > 0
    assert error.response.headers["x-should-retry"] == "false"
    assert native.cancels == ["req1"] and len(native.submits) == 1


def test_fail_fast_refuses_a_wait_over_the_budget(
    native: NativeChatDouble, client: openai.OpenAI
) -> None:
    native.initial = {"wait_time": 3600, "queue_position": 40}
    error = refused(
        lambda: client.chat.completions.create(
            model="m", messages=MESSAGES, extra_body={"horde": {"availability_mode": "fail_fast"}}
        )
    )
    assert error.body["code"] == "queue_unavailable"  # type: ignore[index]
    assert "3600" in error.message


def test_lost_submit_response_is_recovered_with_the_same_key(
    native: NativeChatDouble, client: openai.OpenAI
) -> None:
    native.lose_submit_responses = 1
    answer_later(native)
    completion = client.chat.completions.create(model="m", messages=MESSAGES)
    assert completion.id == "chatcmpl-req1"
    first, second = native.submits
    assert first.body == second.body
    assert first.headers["x-operation-key"] == second.headers["x-operation-key"]
    assert [s.created for s in native.submits] == [True, False]


def test_submit_lost_every_time_is_502_and_not_retried(
    native: NativeChatDouble, client: openai.OpenAI
) -> None:
    native.lose_submit_responses = 10
    error = refused(lambda: client.chat.completions.create(model="m", messages=MESSAGES))
    assert (error.status_code, error.code) == (502, "horde_unavailable")
    assert error.response.headers["x-should-retry"] == "false"  # the Horde may hold it
    assert len({s.headers["x-operation-key"] for s in native.submits}) == 1
    assert [s.created for s in native.submits] == [True, False, False]  # one request at most


def test_lost_signal_still_completes_through_the_poll(
    native: NativeChatDouble, client: openai.OpenAI
) -> None:
    def answer_unsignalled() -> None:
        request_id = native.wait_for_submit()
        native.wait_for_read(request_id)  # the front is waiting now
        native.finish(request_id, content="Found by polling.", signal=False)

    threading.Thread(target=answer_unsignalled, daemon=True).start()
    completion = client.chat.completions.create(model="m", messages=MESSAGES)
    assert completion.choices[0].message.content == "Found by polling."
    assert native.status_reads["req1"] >= 2


def test_client_disconnect_cancels(native: NativeChatDouble, front_url: str) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            front_url + "/v1/chat/completions",
            json={"model": "m", "messages": MESSAGES},
            timeout=httpx.Timeout(10, read=0.8),
        )
    native.wait_for_submit()
    assert native.wait_for_cancels() == ["req1"]


def test_error_after_stream_headers_is_one_error_event_then_done(
    native: NativeChatDouble, front_url: str, client: openai.OpenAI
) -> None:
    with httpx.stream(
        "POST",
        front_url + "/v1/chat/completions",
        json={"model": "m", "messages": MESSAGES, "stream": True},
        timeout=10,
    ) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and len(lines) == 2
    event = json.loads(lines[0][len("data: ") :])
    assert_error(event)
    assert "choices" not in event and event["error"]["code"] == "deadline_exceeded"
    assert native.cancels == ["req1"]
    with pytest.raises(openai.APIError, match="deadline"):
        list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
