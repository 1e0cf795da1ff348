"""OpenAI's Responses API on the front end to end: the official openai SDK (responses.create,
responses.stream, responses.parse) against the live front, the live native API (embedded
Postgres and Redis) and a test worker that pops and submits over HTTP. Every Response, stream
event and error is checked against OpenAI's schema; what the worker received is the chat
request a chat completion of the same conversation makes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pydantic
import pytest
from sqlalchemy.orm import Session, sessionmaker

from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.integration.native_flow import ledger
from tests.support.chat_worker import ChatTestWorker
from tests.support.front import running_front
from tests.support.openai_schema import (
    assert_response,
    assert_response_event,
    refused,
)

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

MODEL = "responses-model-7B"
FAST = {"poll_interval": 0.5, "grace": 2.0, "deadline": 6.0, "queue_info_wait": 0.5}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}


@pytest.fixture
def front(
    horde_stores: EmbeddedStores, native_service: NativeService, native_db: Any
) -> Iterator[str]:
    with running_front(
        horde_stores.redis_url, [native_service.url], service_passkey=SERVICE_PASSKEY, **FAST
    ) as service:
        yield service.url


@pytest.fixture
def worker_key(make_user: Callable[..., MadeUser]) -> str:
    return make_user("responses-worker").api_key


@pytest.fixture
def sdk(front: str, requester: MadeUser) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=front + "/v1", api_key=requester.api_key, max_retries=0) as c:
        yield c


def create(sdk: openai.OpenAI, **kwargs: Any) -> dict[str, Any]:
    """responses.create's raw body, checked against OpenAI's Response schema."""
    raw = sdk.responses.with_raw_response.create(**kwargs)
    body = dict(json.loads(raw.content))
    assert_response(body)
    assert raw.headers["x-request-id"] == body["x_horde"]["request_id"]
    return body


def events_of(front: str, key: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """A streamed response's events, each checked: its SSE event name is its type, it is
    OpenAI's event of that type, its sequence_number the next one from 0."""
    events: list[dict[str, Any]] = []
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.stream(
        "POST", f"{front}/v1/responses", json={**body, "stream": True}, headers=headers, timeout=30
    ) as response:
        assert response.status_code == 200
        name = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                event = json.loads(line.removeprefix("data: "))
                assert event["type"] == name
                assert_response_event(event)
                assert event["sequence_number"] == len(events)
                events.append(event)
    return events


def payload_of(worker: ChatTestWorker) -> dict[str, Any]:
    (job,) = worker.jobs
    return dict(job["payload"])


def test_create_is_the_chat_request_of_the_conversation_and_charged_once(
    sdk: openai.OpenAI,
    native_service: NativeService,
    worker_key: str,
    requester: MadeUser,
    native_db: sessionmaker[Session],
) -> None:
    def respond(job: dict[str, Any]) -> dict[str, Any]:
        usage = {"prompt_tokens": 12, "completion_tokens": 3}
        return {"content": "Hello!", "finish_reason": "stop", "usage": usage}

    url = f"{native_service.url}/api/v2"
    with ChatTestWorker(url, worker_key, model=MODEL, respond=respond) as worker:
        body = create(
            sdk,
            model=MODEL,
            instructions="Answer briefly.",
            input="Say hello",
            max_output_tokens=64,
            temperature=0.5,
        )
    payload = payload_of(worker)
    assert payload["messages"] == [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Say hello"},
    ]
    assert (payload["max_tokens"], payload["temperature"]) == (64, 0.5)
    request_id = body["x_horde"]["request_id"]
    assert body["id"] == f"resp_{request_id}"
    assert (body["status"], body["model"], body["error"]) == ("completed", MODEL, None)
    (message,) = body["output"]
    assert message["content"][0]["text"] == "Hello!"
    assert body["usage"]["input_tokens"] == 12
    assert body["usage"]["output_tokens"] == 3
    assert body["usage"]["total_tokens"] == 15
    assert body["x_horde"]["estimated_usage"] is False
    # the Response repeats the request's keys
    assert (body["instructions"], body["max_output_tokens"], body["temperature"]) == (
        "Answer briefly.",
        64,
        0.5,
    )
    assert (body["tools"], body["tool_choice"], body["top_p"]) == ([], "auto", 1)
    debits = [reason for reason, delta in ledger(native_db, requester.id) if delta < 0]
    assert len(debits) == 2, debits  # one horde tax and one charge, as a chat completion


def test_sdk_output_text_and_a_function_call_loop(
    sdk: openai.OpenAI, native_service: NativeService, worker_key: str
) -> None:
    def respond(job: dict[str, Any]) -> dict[str, Any]:
        last = job["payload"]["messages"][-1]
        if last["role"] == "tool":
            return {"content": f"It is {json.loads(last['content'])['sky']}."}
        return {"content": None, "tool_calls": [CALL], "finish_reason": "tool_calls"}

    url = f"{native_service.url}/api/v2"
    with ChatTestWorker(url, worker_key, model=MODEL, respond=respond) as worker:
        first = sdk.responses.create(
            model=MODEL,
            input="Weather in Paris?",
            tools=[WEATHER],  # type: ignore[list-item]
        )
        (call,) = first.output
        assert call.type == "function_call"
        assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
        assert first.output_text == ""
        history: list[Any] = [
            {"role": "user", "content": "Weather in Paris?"},
            *[item.model_dump(exclude_none=True) for item in first.output],
            {"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "sunny"}'},
        ]
        second = sdk.responses.create(model=MODEL, input=history, tools=[WEATHER])  # type: ignore[list-item]
    assert second.output_text == "It is sunny."
    assert_response(second.to_dict())
    turn = worker.jobs[1]["payload"]
    assert turn["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny"}'},
    ]
    assert turn["tools"][0]["function"]["name"] == "get_weather"
    assert turn["tools"][0]["function"]["strict"] is True


def test_stream_events_of_a_reply_with_reasoning_text_and_a_call(
    front: str, native_service: NativeService, worker_key: str, requester: MadeUser
) -> None:
    def respond(job: dict[str, Any]) -> dict[str, Any]:
        return {
            "content": "Let me look.",
            "reasoning_content": "The user wants weather.",
            "tool_calls": [CALL],
            "finish_reason": "tool_calls",
        }

    url = f"{native_service.url}/api/v2"
    with ChatTestWorker(url, worker_key, model=MODEL, respond=respond):
        events = events_of(
            front, requester.api_key, {"model": MODEL, "input": "Weather?", "tools": [WEATHER]}
        )
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["output"] == []
    reasoning = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    arguments = "".join(
        e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
    )
    assert (reasoning, text, arguments) == (
        "The user wants weather.",
        "Let me look.",
        '{"city": "Paris"}',
    )
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message", "function_call"]
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert added == [0, 1, 2]
    assert done == final["output"]


def test_sdk_stream_and_parse(
    sdk: openai.OpenAI, native_service: NativeService, worker_key: str
) -> None:
    class Weather(pydantic.BaseModel):
        city: str
        celsius: int

    def respond(job: dict[str, Any]) -> dict[str, Any]:
        if "response_format" in job["payload"]:
            return {"content": json.dumps({"city": "Oslo", "celsius": -3})}
        return {"content": "Hi there", "finish_reason": "stop"}

    url = f"{native_service.url}/api/v2"
    with ChatTestWorker(url, worker_key, model=MODEL, respond=respond) as worker:
        with sdk.responses.stream(model=MODEL, input="Say hi") as stream:
            deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
            final = stream.get_final_response()
        parsed = sdk.responses.parse(model=MODEL, input="Oslo?", text_format=Weather)
    assert "".join(deltas) == final.output_text == "Hi there"
    assert parsed.output_parsed == Weather(city="Oslo", celsius=-3)
    fmt = worker.jobs[1]["payload"]["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "Weather"
    assert fmt["json_schema"]["strict"] is True


def test_incomplete_at_max_output_tokens(
    front: str,
    sdk: openai.OpenAI,
    native_service: NativeService,
    worker_key: str,
    requester: MadeUser,
) -> None:
    def respond(job: dict[str, Any]) -> dict[str, Any]:
        return {"content": "Once upon a", "finish_reason": "length"}

    url = f"{native_service.url}/api/v2"
    with ChatTestWorker(url, worker_key, model=MODEL, respond=respond):
        body = create(sdk, model=MODEL, input="A story", max_output_tokens=16)
        events = events_of(front, requester.api_key, {"model": MODEL, "input": "A story"})
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["status"] == "incomplete"
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_reasoning_left_out_on_request(
    sdk: openai.OpenAI, native_service: NativeService, worker_key: str
) -> None:
    def respond(job: dict[str, Any]) -> dict[str, Any]:
        return {"content": "42", "reasoning_content": "Six times seven."}

    url = f"{native_service.url}/api/v2"
    with ChatTestWorker(url, worker_key, model=MODEL, respond=respond):
        shown = create(sdk, model=MODEL, input="?", reasoning={"effort": "low"})
        hidden = create(
            sdk, model=MODEL, input="?", extra_body={"horde": {"include_reasoning": False}}
        )
    assert [i["type"] for i in shown["output"]] == ["reasoning", "message"]
    assert shown["output"][0]["content"] == [{"type": "reasoning_text", "text": "Six times seven."}]
    assert shown["reasoning"]["effort"] == "low"
    assert [i["type"] for i in hidden["output"]] == ["message"]


def test_stateful_and_unsupported_keys_are_refused_naming_them(
    front: str, sdk: openai.OpenAI, native_service: NativeService, worker_key: str
) -> None:
    create_ = sdk.responses.create
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"previous_response_id": "resp_123"}, "UnsupportedChatParameter", "previous_response_id"),
        ({"store": True}, "UnsupportedChatParameter", "store"),
        ({"background": True}, "UnsupportedChatParameter", "background"),
        ({"conversation": "conv_1"}, "UnsupportedChatParameter", "conversation"),
        ({"tools": [{"type": "web_search"}]}, "UnsupportedChatParameter", "tools.[0].type"),
        ({"reasoning": {"summary": "auto"}}, "UnsupportedChatParameter", "reasoning.summary"),
        ({"max_output_tokens": 8}, "InvalidChatParameter", "max_output_tokens"),
        ({"tool_choice": "required"}, "ToolsRequired", "tool_choice"),
        ({"extra_body": {"frobnicate": 1}}, "UnsupportedChatParameter", "frobnicate"),
    ]
    url = f"{native_service.url}/api/v2"
    with ChatTestWorker(url, worker_key, model=MODEL) as worker:
        for extra, code, param in cases:
            error = refused(
                lambda extra=extra: create_(model=MODEL, input="Hi", **extra),
                openai.BadRequestError,
            )
            assert (error.code, error.param) == (code, param), error.body
            assert param in error.message
        # a chat refusal names the item it came from
        unanswered = [
            {"type": "function_call", "call_id": "c9", "name": "get_weather", "arguments": "{}"}
        ]
        error = refused(
            lambda: create_(model=MODEL, input=unanswered, tools=[WEATHER]),  # type: ignore[arg-type,list-item]
            openai.BadRequestError,
        )
        assert (error.code, error.param) == ("UnansweredToolCalls", "input.[0]")
        parts = [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]
        error = refused(lambda: create_(model=MODEL, input=parts), openai.BadRequestError)  # type: ignore[arg-type]
        assert (error.code, error.param) == (
            "UnsupportedChatParameter",
            "input.[0].content.[0].type",
        )
        store_false = create(sdk, model=MODEL, input="Hi", store=False, include=[])
    assert store_false["status"] == "completed"
    assert len(worker.jobs) == 1  # nothing refused was queued


def test_an_error_after_the_headers_is_one_error_event(
    front: str, native_service: NativeService, worker_key: str, requester: MadeUser
) -> None:
    url = f"{native_service.url}/api/v2"
    with ChatTestWorker(url, worker_key, model=MODEL, respond=lambda job: {"state": "faulted"}):
        events = events_of(front, requester.api_key, {"model": MODEL, "input": "Hi"})
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "error"]
    error = events[-1]
    assert (error["code"], error["param"]) == ("ChatRequestFaulted", None)
    assert "faulted" in error["message"]


def test_a_large_body_is_translated_in_a_parser_process(
    sdk: openai.OpenAI, native_service: NativeService, worker_key: str
) -> None:
    """Over the front's 16 KiB the body is parsed and translated off the event loop; its
    admission and its refusals are the same."""
    long_text = "word " * 4000  # 20 KB
    url = f"{native_service.url}/api/v2"
    wide = {"max_context_length": 16384}  # a context the long text fits
    answer = lambda job: {"content": "Ok"}  # noqa: E731
    with ChatTestWorker(url, worker_key, model=MODEL, respond=answer, limits=wide) as w:
        body = create(sdk, model=MODEL, input=long_text)
        parts = [{"type": "input_text", "text": long_text}, {"type": "input_file", "file_id": "f"}]
        error = refused(
            lambda: sdk.responses.create(
                model=MODEL,
                input=[{"role": "user", "content": parts}],  # type: ignore[list-item]
            ),
            openai.BadRequestError,
        )
    assert body["output"][0]["content"][0]["text"] == "Ok"
    assert w.jobs[0]["payload"]["messages"] == [{"role": "user", "content": long_text}]
    assert (error.code, error.param) == ("UnsupportedChatParameter", "input.[0].content.[1].type")
