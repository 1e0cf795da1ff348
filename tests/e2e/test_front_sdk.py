"""The chat front end to end: the official openai SDK (sync and async) against the live
front, the live native API (embedded Postgres and Redis) and a test worker that pops and
submits over HTTP. Every response, chunk and error is checked against OpenAI's schema."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pydantic
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from runtime.config import Settings
from runtime.native.db.tables import WaitingPrompt
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from tests.conftest import MadeUser
from tests.integration.native_flow import ledger
from tests.support.chat_worker import ChatTestWorker
from tests.support.dropping_proxy import DroppingProxy
from tests.support.front import open_waits, running_front
from tests.support.native import running_native
from tests.support.openai_schema import (
    assert_chunk,
    assert_completion,
    assert_model_list,
    refused,
)
from tests.support.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

PASSKEY = "e2e-front-passkey"
MODEL = "e2e-model-7B"
MESSAGES: list[Any] = [{"role": "user", "content": "Say hello"}]
FAST = {"poll_interval": 0.5, "grace": 2.0, "queue_info_wait": 0.5}
"""Shortened so the tests of the poll and the grace do not wait their shipped seconds; the
deadline stays the shipped one, unless a test says otherwise."""
DEADLINE = {"deadline": 4.0}
"""For the tests that wait for the deadline: it passes in 4 s, not 540."""
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="session")
def trusted_native(horde_stores: EmbeddedStores) -> Iterator[NativeService]:
    """A second native replica on the same stores, configured with the front's passkey."""
    with running_native(horde_stores, Settings(service_passkey=PASSKEY)) as service:
        yield service


@pytest.fixture
def native_url(trusted_native: NativeService, native_db: sessionmaker[Session]) -> str:
    return f"{trusted_native.url}/api/v2"


@pytest.fixture
def front_options() -> dict[str, Any]:
    """The front's options beside FAST (a test parametrizes it: DEADLINE)."""
    return {}


@pytest.fixture
def front(
    horde_stores: EmbeddedStores,
    trusted_native: NativeService,
    native_url: str,
    front_options: dict[str, Any],
) -> Iterator[str]:
    with running_front(
        horde_stores.redis_url,
        [trusted_native.url],
        service_passkey=PASSKEY,
        max_body_bytes=2**20,  # far under the default (images inline), so 413 is cheap to reach
        **FAST,
        **front_options,
    ) as service:
        yield service.url


@pytest.fixture
def worker_key(make_user: Callable[..., MadeUser]) -> str:
    return make_user("worker-owner").api_key


@pytest.fixture
def client(front: str, requester: MadeUser) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=front + "/v1", api_key=requester.api_key, max_retries=2) as sdk:
        yield sdk


def raw_create(client: openai.OpenAI, **kwargs: Any) -> dict[str, Any]:
    raw = client.chat.completions.with_raw_response.create(**kwargs)
    body = dict(json.loads(raw.content))
    assert_completion(body)
    return body


def chat_rows(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        return int(session.scalar(select(func.count()).where(WaitingPrompt.is_chat.is_(True))) or 0)


def charges(sessions: sessionmaker[Session], user: MadeUser) -> list[str]:
    """The reasons of the user's debits: one request is one horde_tax and one charge."""
    return [reason for reason, delta in ledger(sessions, user.id) if delta < 0]


def test_plain_completion_is_charged_once(
    client: openai.OpenAI, native_url: str, worker_key: str, requester: MadeUser, native_db: Any
) -> None:
    with ChatTestWorker(native_url, worker_key, model=MODEL) as worker:
        body = raw_create(client, model=MODEL, messages=MESSAGES)
    message = body["choices"][0]["message"]
    assert message["content"] == "You said: Say hello"
    assert body["model"] == MODEL
    assert body["choices"][0]["finish_reason"] == "stop"
    request_id = body["x_horde"]["request_id"]
    assert body["id"] == f"chatcmpl-{request_id}"
    assert body["x_horde"]["charge_basis"] == "output_estimate"
    assert body["x_horde"]["kudos"] > 0
    assert body["x_horde"]["estimated_usage"] is True  # the test worker reports no counts
    assert len(worker.jobs) == 1
    assert chat_rows(native_db) == 1
    assert charges(native_db, requester) == ["horde_tax", "charge"]


def test_async_sdk_and_reported_usage(
    front: str, requester: MadeUser, native_url: str, worker_key: str
) -> None:
    def respond(job: dict[str, Any]) -> dict[str, Any]:
        usage = {"prompt_tokens": 9, "completion_tokens": 2, "reasoning_tokens": 1}
        return {"content": "Hi!", "reasoning_content": "Greet.", "usage": usage}

    async def call() -> Any:
        async with openai.AsyncOpenAI(base_url=front + "/v1", api_key=requester.api_key) as sdk:
            return await sdk.chat.completions.create(model=MODEL, messages=MESSAGES)

    with ChatTestWorker(native_url, worker_key, model=MODEL, respond=respond):
        completion = asyncio.run(call())
    assert completion.choices[0].message.content == "Hi!"
    assert (completion.choices[0].message.model_extra or {})["reasoning_content"] == "Greet."
    assert completion.usage is not None
    assert completion.usage.total_tokens == 11
    assert (completion.model_extra or {})["x_horde"]["estimated_usage"] is False


def test_tools_round_trip(client: openai.OpenAI, native_url: str, worker_key: str) -> None:
    def respond(job: dict[str, Any]) -> dict[str, Any]:
        last = job["payload"]["messages"][-1]
        if last["role"] == "tool":
            return {"content": f"It is {json.loads(last['content'])['sky']}."}
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
        return {"content": None, "tool_calls": [call], "finish_reason": "tool_calls"}

    with ChatTestWorker(native_url, worker_key, model=MODEL, respond=respond):
        first = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=[WEATHER])
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        calls = choice.message.tool_calls or []
        assert calls[0].function.name == "get_weather"  # type: ignore[union-attr]
        history = [
            *MESSAGES,
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": calls[0].id, "content": '{"sky": "sunny"}'},
        ]
        second = raw_create(client, model=MODEL, messages=history, tools=[WEATHER])
    assert second["choices"][0]["message"]["content"] == "It is sunny."


class Weather(pydantic.BaseModel):
    city: str
    celsius: int


def test_json_schema_with_parse(client: openai.OpenAI, native_url: str, worker_key: str) -> None:
    def respond(job: dict[str, Any]) -> dict[str, Any]:
        assert job["payload"]["response_format"]["type"] == "json_schema"
        return {"content": json.dumps({"city": "Oslo", "celsius": -3})}

    with ChatTestWorker(native_url, worker_key, model=MODEL, respond=respond):
        parsed = client.chat.completions.parse(
            model=MODEL, messages=MESSAGES, response_format=Weather
        )
    assert parsed.choices[0].message.parsed == Weather(city="Oslo", celsius=-3)


def test_whole_reply_stream_with_usage(
    client: openai.OpenAI, native_url: str, worker_key: str
) -> None:
    with ChatTestWorker(native_url, worker_key, model=MODEL):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        lines = [line for line in raw.http_response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    for chunk in chunks:
        assert_chunk(chunk)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "You said: Say hello"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] > 0


def test_refusals_carry_the_sdk_class_param_and_code(
    front: str, client: openai.OpenAI, native_url: str, worker_key: str, native_db: Any
) -> None:
    create = client.chat.completions.create
    with ChatTestWorker(native_url, worker_key, model=MODEL, features=[]):
        cases: list[tuple[Callable[[], Any], type[openai.APIStatusError], str, str | None]] = [
            (
                lambda: create(model=MODEL, messages=MESSAGES, n=2),
                openai.BadRequestError,
                "UnsupportedChatParameter",
                "n",
            ),
            (
                lambda: create(model=MODEL, messages=MESSAGES, tool_choice="auto"),
                openai.BadRequestError,
                "ToolsRequired",
                "tool_choice",
            ),
            (
                lambda: create(model="no-such-model", messages=MESSAGES),
                openai.NotFoundError,
                "model_not_found",
                "model",
            ),
            (
                lambda: create(model="a:b", messages=MESSAGES),
                openai.NotFoundError,
                "model_not_found",
                "model",
            ),
            (
                lambda: create(model=MODEL, messages=MESSAGES, tools=[WEATHER]),
                openai.NotFoundError,
                "no_worker_supports_features",
                None,
            ),
        ]
        for call, cls, code, param in cases:
            error = refused(call, cls)
            assert (error.code, error.param) == (code, param), error.body
        with openai.OpenAI(base_url=front + "/v1", api_key="not-a-key") as stranger:
            error = refused(
                lambda: stranger.chat.completions.create(model=MODEL, messages=MESSAGES),
                openai.AuthenticationError,
            )
            assert error.code == "InvalidAPIKey"
    big = httpx.post(front + "/v1/chat/completions", content=b"{" + b" " * 2_000_000 + b"}")
    assert big.status_code == 413
    assert big.json()["error"]["code"] == "PayloadTooLarge"
    assert chat_rows(native_db) == 0  # nothing was queued by any refusal


def test_front_at_capacity(
    horde_stores: EmbeddedStores,
    trusted_native: NativeService,
    native_url: str,
    worker_key: str,
    requester: MadeUser,
) -> None:
    with (
        running_front(
            horde_stores.redis_url, [trusted_native.url], per_source_cap=1, **FAST, **DEADLINE
        ) as f,
        ChatTestWorker(native_url, worker_key, model=MODEL, respond=lambda job: None),
        openai.OpenAI(base_url=f.url + "/v1", api_key=requester.api_key, max_retries=0) as sdk,
    ):
        outcome: list[BaseException] = []

        def wait_in_the_slot() -> None:
            try:
                sdk.chat.completions.create(model=MODEL, messages=MESSAGES)
            except openai.APIStatusError as exc:
                outcome.append(exc)

        waiting = threading.Thread(target=wait_in_the_slot, daemon=True)
        waiting.start()
        until(lambda: open_waits(f.url) == 1, "the first request to hold the one slot")
        error = refused(
            lambda: sdk.chat.completions.create(model=MODEL, messages=MESSAGES),
            openai.InternalServerError,
        )
        assert (error.status_code, error.code) == (503, "FrontAtCapacity")
        assert error.response.headers["retry-after"] == "2"
        waiting.join(timeout=60)  # its deadline (4 s) ends it
        assert [type(e) for e in outcome] == [openai.APITimeoutError] or outcome[0].code == (
            "deadline_exceeded"
        )


@pytest.mark.parametrize("front_options", [DEADLINE])
def test_no_sdk_retry_once_submitted(
    client: openai.OpenAI, native_url: str, worker_key: str, native_db: Any
) -> None:
    with ChatTestWorker(native_url, worker_key, model=MODEL, respond=lambda job: None):
        error = refused(
            lambda: client.chat.completions.create(model=MODEL, messages=MESSAGES),
            openai.APIStatusError,
        )
    assert (error.status_code, error.code) == (408, "deadline_exceeded")
    assert error.response.headers["x-should-retry"] == "false"
    assert chat_rows(native_db) == 1  # max_retries=2, yet one request


def test_lost_submit_response_is_recovered_and_charged_once(
    horde_stores: EmbeddedStores,
    trusted_native: NativeService,
    native_url: str,
    worker_key: str,
    requester: MadeUser,
    native_db: Any,
) -> None:
    with (
        DroppingProxy(trusted_native.port, drop=b"POST /api/v2/generate/chat/async") as proxy,
        running_front(
            horde_stores.redis_url,
            [proxy.url, trusted_native.url],
            service_passkey=PASSKEY,
            **FAST,
        ) as f,
        ChatTestWorker(native_url, worker_key, model=MODEL) as worker,
        openai.OpenAI(base_url=f.url + "/v1", api_key=requester.api_key) as sdk,
    ):
        completion = sdk.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert proxy.dropped == 1
    assert completion.choices[0].message.content == "You said: Say hello"
    assert chat_rows(native_db) == 1
    assert len(worker.jobs) == 1
    assert charges(native_db, requester) == ["horde_tax", "charge"]


def test_client_disconnect_cancels(
    front: str,
    requester: MadeUser,
    native_url: str,
    worker_key: str,
    native_db: sessionmaker[Session],
) -> None:
    def cancelled() -> bool:
        with native_db() as session:
            found = session.scalars(select(WaitingPrompt.cancelled)).all()
        return list(found) == [True]

    with ChatTestWorker(native_url, worker_key, model=MODEL) as worker:
        worker.pause()
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                front + "/v1/chat/completions",
                headers={"Authorization": f"Bearer {requester.api_key}"},
                json={"model": MODEL, "messages": MESSAGES},
                timeout=httpx.Timeout(10, read=1.0),
            )
        until(cancelled, "the front to notice the client gone and cancel")
        assert worker.pop_once().get("id") is None  # the cancelled request left the queue
        assert worker.jobs == []


def test_lost_signals_still_complete_through_the_poll(
    horde_stores: EmbeddedStores,
    trusted_native: NativeService,
    native_url: str,
    worker_key: str,
    requester: MadeUser,
) -> None:
    config = {**FAST, "deadline": 20.0}
    with (
        running_front(
            horde_stores.redis_url,
            [trusted_native.url],
            channel_of=lambda request_id: f"nobody-publishes-here:{request_id}",
            **config,
        ) as f,
        ChatTestWorker(native_url, worker_key, model=MODEL),
        openai.OpenAI(base_url=f.url + "/v1", api_key=requester.api_key) as sdk,
    ):
        completion = sdk.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert completion.choices[0].message.content == "You said: Say hello"


def test_models_lists_what_online_chat_workers_serve(
    front: str, native_url: str, worker_key: str
) -> None:
    with ChatTestWorker(native_url, worker_key, model=MODEL):
        body = httpx.get(front + "/v1/models").json()
    assert_model_list(body)
    assert [m["id"] for m in body["data"]] == [MODEL]
