"""The front's waits against the real native API (tests/conftest.py), each situation made
for real: a worker that is paused (the deadline), a request only trusted workers may take
(never possible, no thread for fail_fast), a worker that faults every job, a worker that
reports csam (done without an answer), a worker that re-declares between the submit and
the front's first status read (declaration and limits gaps), a submit whose response is
lost (a proxy resets the connection after the native API answered), and a front listening
on a second, separate Redis server (every completion signal lost, the fallback poll
completes it).

The front reaches the native API through a recording DroppingProxy, so a test reads what
the native side received (headers, bodies, status reads); the rest is read from Postgres.
Each test drives the front with the official openai SDK (or httpx where the SDK would hide
what is checked), and every body is validated against OpenAI's schema.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from generated.chat.names import GUARANTEE_PROMPT_OVERFLOW_REFUSED
from generated.wire import ANONYMOUS_API_KEY
from runtime.native.db.tables import OperationKey, WaitingPrompt
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from runtime.stores.embedded_redis import EmbeddedRedis
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.integration.chat_flow import chat_body
from tests.integration.native_flow import ledger
from tests.support.chat_worker import ChatTestWorker, Respond
from tests.support.dropping_proxy import DroppingProxy, split
from tests.support.front import running_front
from tests.support.openai_schema import assert_chunk, assert_completion, assert_error
from tests.support.stores import running_redis
from tests.support.waiting import until

pytestmark = pytest.mark.integration

MODEL = "waits-model"
MESSAGES = [{"role": "user", "content": "Say hello"}]
FAST = {"poll_interval": 0.3, "grace": 1.0, "queue_info_wait": 0.5}
"""Shortened so a test of the poll, the grace or the queue-information wait does not wait
their shipped seconds; the deadline stays the shipped one, unless a test says otherwise."""
DEADLINE = {"deadline": 3.0}
"""For the tests of the deadline itself: it passes in 3 s, not 540."""
BUDGET = {"deadline": 20.0}
"""For fail_fast's budget: under the 52 s that 512 tokens take at the assumed 10 tokens a
second, far over what a request served at once takes on a busy machine."""
SUBMIT = b"POST /api/v2/generate/chat/async"
STATUS = b"GET /api/v2/generate/chat/status/"
TRUSTED_ONLY = {"horde": {"trusted_workers": True}}  # the test worker's owner is not trusted
USAGE = {"prompt_tokens": 11, "completion_tokens": 3}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


@pytest.fixture
def proxy(native_service: NativeService, native_db: Any) -> Iterator[DroppingProxy]:
    with DroppingProxy(native_service.port) as recording:
        yield recording


def front_on(stores: EmbeddedStores, roots: list[str], **config: Any) -> Any:
    options = {**FAST, "submit_timeout": 5.0, **config}
    return running_front(stores.redis_url, roots, service_passkey=SERVICE_PASSKEY, **options)


@pytest.fixture
def front_options() -> dict[str, Any]:
    """The front's options beside FAST (a test parametrizes it: DEADLINE, BUDGET)."""
    return {}


@pytest.fixture
def front_url(
    horde_stores: EmbeddedStores, proxy: DroppingProxy, front_options: dict[str, Any]
) -> Iterator[str]:
    with front_on(horde_stores, [proxy.url], **front_options) as front:
        yield front.url


@pytest.fixture
def client(front_url: str, requester: MadeUser) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=front_url + "/v1", api_key=requester.api_key, max_retries=2) as sdk:
        yield sdk


@pytest.fixture
def serve(native_url: str, owner: MadeUser) -> Callable[..., ChatTestWorker]:
    """``serve(respond, **options)``: a test worker of the owner for MODEL (enter it)."""

    def make(respond: Respond | None = None, **options: Any) -> ChatTestWorker:
        if respond is not None:
            options["respond"] = respond
        return ChatTestWorker(native_url, owner.api_key, model=MODEL, **options)

    return make


def replying(**fields: Any) -> Respond:
    return lambda job: {"finish_reason": "stop", **fields}


def rows(sessions: sessionmaker[Session]) -> list[WaitingPrompt]:
    with sessions() as session:
        found = session.scalars(
            select(WaitingPrompt).where(WaitingPrompt.is_chat.is_(True)).order_by("created")
        ).all()
        for row in found:
            _ = row.chat_request  # deferred: load it before the session closes
        return list(found)


def refused(call: Callable[[], Any]) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as info:
        call()
    assert_error(info.value.response.json())
    return info.value


def refused_chat(sdk: openai.OpenAI, **params: Any) -> openai.APIStatusError:
    """The error of a chat request for MESSAGES to MODEL (``params`` added) that must fail."""
    return refused(lambda: sdk.chat.completions.create(model=MODEL, messages=MESSAGES, **params))


def test_plain_completion_forwards_key_passkey_source_and_operation_key(
    serve: Callable[..., ChatTestWorker],
    client: openai.OpenAI,
    proxy: DroppingProxy,
    native_db: sessionmaker[Session],
    requester: MadeUser,
) -> None:
    with serve(replying(content="Hello there.", usage=USAGE)):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=MESSAGES, logprobs=False, store=False
        )
    body = json.loads(raw.content)
    assert_completion(body)
    (row,) = rows(native_db)
    assert body["id"] == f"chatcmpl-{row.id}"
    assert body["choices"][0]["message"]["content"] == "Hello there."
    (charge,) = [-delta for reason, delta in ledger(native_db, requester.id) if reason == "charge"]
    (tax,) = [-delta for reason, delta in ledger(native_db, requester.id) if reason == "horde_tax"]
    assert body["x_horde"] == {
        "request_id": str(row.id),
        "kudos": float(charge + tax),  # what the request cost, the horde tax included
        "charge_basis": "output_estimate",
        "estimated_usage": False,
    }
    assert body["usage"] == {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
    (submit,) = proxy.sent(SUBMIT)
    headers, sent = split(submit)
    assert headers["apikey"] == requester.api_key
    assert row.user_id == requester.id
    assert headers["x-horde-service-passkey"] == SERVICE_PASSKEY
    assert headers["x-forwarded-for"] == "127.0.0.1" == row.ipaddr
    assert len(headers["x-operation-key"]) >= 16
    stored = json.loads(sent)
    assert "logprobs" not in stored
    assert "store" not in stored
    assert not row.cancelled


def test_async_sdk_and_missing_counts_are_estimated(
    serve: Callable[..., ChatTestWorker], front_url: str, requester: MadeUser
) -> None:
    async def call() -> Any:
        sdk = openai.AsyncOpenAI(base_url=front_url + "/v1", api_key=requester.api_key)
        async with sdk:
            return await sdk.chat.completions.create(model=MODEL, messages=MESSAGES)

    with serve(replying(content="abcdef", usage={}, reasoning_content="think")):
        completion = asyncio.run(call())
    assert_completion(completion.model_dump(exclude_unset=True))
    extra = completion.model_extra or {}
    assert extra["x_horde"]["estimated_usage"] is True
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 4  # 11 characters over 3 per token
    assert completion.choices[0].message.model_extra["reasoning_content"] == "think"


def test_include_reasoning_false_leaves_reasoning_out(
    serve: Callable[..., ChatTestWorker], client: openai.OpenAI
) -> None:
    with serve(replying(content="Hi.", reasoning_content="secret thoughts")):
        completion = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, extra_body={"horde": {"include_reasoning": False}}
        )
    assert "reasoning_content" not in (completion.choices[0].message.model_extra or {})


def test_whole_reply_stream_with_tool_calls_and_usage(
    serve: Callable[..., ChatTestWorker], front_url: str, requester: MadeUser, native_db: Any
) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    respond = replying(content=None, tool_calls=[call], finish_reason="tool_calls", usage=USAGE)
    with (
        serve(respond),
        httpx.stream(
            "POST",
            front_url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {requester.api_key}"},
            json={
                "model": MODEL,
                "messages": MESSAGES,
                "tools": [TOOL],
                "stream": True,
                "stream_options": {"include_usage": True},
            },
            timeout=10,
        ) as response,
    ):
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    for chunk in chunks:
        assert_chunk(chunk)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-3]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "f"
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["total_tokens"] == 14
    assert all(c["usage"] is None for c in chunks[:-1])
    (row,) = rows(native_db)
    assert {c["id"] for c in chunks} == {f"chatcmpl-{row.id}"}


def test_sdk_stream_accumulates_the_whole_reply(
    serve: Callable[..., ChatTestWorker], client: openai.OpenAI
) -> None:
    with serve(replying(content="Streamed whole.")):
        stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "Streamed whole."


@pytest.mark.parametrize("front_options", [DEADLINE])
def test_deadline_is_408_not_retried_and_cancels(
    serve: Callable[..., ChatTestWorker],
    client: openai.OpenAI,
    proxy: DroppingProxy,
    native_db: Any,
) -> None:
    with serve() as worker:
        worker.pause()  # online, but it never takes the job
        error = refused_chat(client)
    assert error.status_code == 408
    assert error.body["code"] == "deadline_exceeded"  # type: ignore[index]
    assert error.response.headers["x-should-retry"] == "false"
    assert len(proxy.sent(SUBMIT)) == 1  # the SDK did not retry a submitted request
    assert [row.cancelled for row in rows(native_db)] == [True]


def test_grace_without_a_possible_worker_is_503_and_cancels(
    serve: Callable[..., ChatTestWorker],
    client: openai.OpenAI,
    proxy: DroppingProxy,
    native_db: Any,
) -> None:
    with serve():
        error = refused_chat(client, extra_body=TRUSTED_ONLY)
    assert isinstance(error, openai.InternalServerError)
    assert (error.status_code, error.body["code"]) == (503, "no_eligible_worker")  # type: ignore[index]
    # says what happened, in the client's words (not "within the grace"): FAST's grace is 1 s
    assert error.message.endswith("no online worker could take it for 1 s")
    assert error.response.headers["x-should-retry"] == "false"
    assert len(proxy.sent(SUBMIT)) == 1
    assert [row.cancelled for row in rows(native_db)] == [True]


def test_faulted_is_502_and_not_cancelled(
    serve: Callable[..., ChatTestWorker],
    client: openai.OpenAI,
    proxy: DroppingProxy,
    native_db: Any,
) -> None:
    with serve(lambda job: {"state": "faulted"}) as worker:  # past the request's fault limit
        error = refused_chat(client)
    assert (error.status_code, error.body["code"]) == (502, "ChatRequestFaulted")  # type: ignore[index]
    assert len(proxy.sent(SUBMIT)) == 1
    assert len(worker.jobs) == 3
    (row,) = rows(native_db)
    assert row.faulted
    assert not row.cancelled


def test_a_faulted_requests_error_names_the_latest_fault_reasons_and_its_request_id(
    serve: Callable[..., ChatTestWorker], client: openai.OpenAI, native_db: Any
) -> None:
    reason = "prompt_overflow: the conversation needs 5000 tokens but the backend has 4096"
    fault = {"type": "generation", "value": "faulted", "ref": reason}
    with serve(lambda job: {"state": "faulted", "gen_metadata": [fault]}):
        error = refused_chat(client)
    (row,) = rows(native_db)
    assert (error.status_code, error.body["code"]) == (502, "ChatRequestFaulted")  # type: ignore[index]
    assert error.message.endswith(f"the latest reasons: {reason}; {reason}; {reason}")
    assert error.body["metadata"] == {"request_id": str(row.id)}  # type: ignore[index]
    assert error.response.headers["x-request-id"] == str(row.id)


def test_done_without_a_generation_is_502_and_cancels(
    serve: Callable[..., ChatTestWorker], client: openai.OpenAI, native_db: Any
) -> None:
    with serve(replying(content="withheld", state="csam")):  # landed, never shown
        error = refused_chat(client)
    assert (error.status_code, error.body["code"]) == (502, "no_generation")  # type: ignore[index]
    assert [row.cancelled for row in rows(native_db)] == [True]


def redeclare_at_submit(worker: ChatTestWorker, **declaration: Any) -> Callable[[bytes], None]:
    """A proxy hook: before the front's submit reaches the native API, the worker (the only
    one serving MODEL) pops again with ``declaration`` (features, limits). The front opened
    the request with every feature declared; the native submit meets the gap. (The submit
    answers with its first status, so the front reads no status in between a later
    re-declaration could race with.)"""
    done = threading.Event()

    def hook(request: bytes) -> None:
        if request.startswith(SUBMIT) and not done.is_set():
            done.set()
            for name, value in declaration.items():
                setattr(worker, name, value)
            assert worker.pop_once().get("id") is None

    return hook


@pytest.mark.parametrize("stream", [False, True])
def test_declaration_gap_is_404_before_any_stream(
    serve: Callable[..., ChatTestWorker],
    client: openai.OpenAI,
    proxy: DroppingProxy,
    native_db: Any,
    stream: bool,
) -> None:
    with serve() as worker:  # declares everything at the submit
        worker.pause()
        proxy.on_request = redeclare_at_submit(worker, features=[GUARANTEE_PROMPT_OVERFLOW_REFUSED])
        error = refused_chat(client, tools=[TOOL], tool_choice="required", stream=stream)
    assert isinstance(error, openai.NotFoundError)
    assert error.body["code"] == "no_worker_supports_features"  # type: ignore[index]
    assert "tool_choice_enforced" in error.message
    assert rows(native_db) == []  # refused by the submit: nothing queued, nothing to cancel
    assert not proxy.sent(STATUS)


def test_limits_gap_is_400(
    serve: Callable[..., ChatTestWorker],
    client: openai.OpenAI,
    proxy: DroppingProxy,
    native_db: Any,
) -> None:
    with serve() as worker:
        worker.pause()
        proxy.on_request = redeclare_at_submit(worker, limits={"max_tools": 1})
        second = {"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}}
        error = refused_chat(client, tools=[TOOL, second])
    assert isinstance(error, openai.BadRequestError)
    assert error.body["code"] == "no_worker_supports_limit"  # type: ignore[index]
    assert rows(native_db) == []  # refused by the submit: nothing queued, nothing to cancel
    assert not proxy.sent(STATUS)


@pytest.mark.parametrize("stream", [False, True])
def test_fail_fast_without_threads_is_queue_unavailable(
    serve: Callable[..., ChatTestWorker],
    client: openai.OpenAI,
    proxy: DroppingProxy,
    native_db: Any,
    stream: bool,
) -> None:
    horde = {**TRUSTED_ONLY["horde"], "availability_mode": "fail_fast"}
    with serve():
        error = refused_chat(client, stream=stream, extra_body={"horde": horde})
    assert (error.status_code, error.body["code"]) == (503, "queue_unavailable")  # type: ignore[index]
    assert int(error.response.headers["retry-after"]) > 0
    assert error.response.headers["x-should-retry"] == "false"
    assert len(proxy.sent(SUBMIT)) == 1
    assert [row.cancelled for row in rows(native_db)] == [True]


@pytest.mark.parametrize("front_options", [BUDGET])
def test_fail_fast_refuses_a_wait_over_the_budget(
    serve: Callable[..., ChatTestWorker],
    client: openai.OpenAI,
    native_client: httpx.Client,
    requester: MadeUser,
) -> None:
    with serve() as worker:
        worker.pause()  # one thread at the assumed rate: 512 tokens ahead take 52 s
        ahead = chat_body(model=MODEL, max_tokens=512)
        queued = native_client.post(
            "/generate/chat/async", headers={"apikey": requester.api_key}, json=ahead
        )
        assert queued.status_code == 202, queued.text
        error = refused_chat(
            client, max_tokens=16, extra_body={"horde": {"availability_mode": "fail_fast"}}
        )
    assert error.body["code"] == "queue_unavailable"  # type: ignore[index]
    found = re.search(r"estimated wait of (\d+) s", error.message)
    assert found is not None, error.message
    assert int(found.group(1)) > BUDGET["deadline"], error.message


@pytest.mark.parametrize("front_options", [BUDGET])
def test_fail_fast_is_served_when_a_worker_is_free_whatever_its_max_tokens(
    serve: Callable[..., ChatTestWorker], client: openai.OpenAI
) -> None:
    """The estimate is the queued work ahead over the eligible throughput (design doc:
    "Admission against the online pool"), not the request's own generation: with nothing
    ahead and a worker free, 512 tokens at the assumed 10 a second (52 s) are no reason to
    refuse a 20 s budget."""
    with serve(replying(content="Hi")):
        reply = client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,  # type: ignore[arg-type]
            max_tokens=512,
            extra_body={"horde": {"availability_mode": "fail_fast"}},
        )
    assert reply.choices[0].message.content == "Hi"


def test_fail_fast_decides_on_a_status_with_queue_information(
    horde_stores: EmbeddedStores,
    native_service: NativeService,
    native_db: sessionmaker[Session],
    native_url: str,
    serve: Callable[..., ChatTestWorker],
    requester: MadeUser,
) -> None:
    """A status with nothing queued and no worker generating says nothing of the queue
    (upstream's horde answers so until its cached positions refresh), so the front reads
    it again for up to queue_info_wait before it decides (design doc: "Admission against
    the online pool"). An anonymous request (the lowest priority) meets that status; on its
    first read again a user's 512-token request has gone ahead of it, and that read
    refuses it (proxy: the read is held until the user's request is queued)."""
    jumped: list[int] = []

    def jump_the_queue(request: bytes) -> None:
        if request.startswith(STATUS) and not jumped:
            ahead = httpx.post(
                native_url + "/generate/chat/async",
                headers={"apikey": requester.api_key},
                json=chat_body(model=MODEL, max_tokens=512),
                timeout=30,
            )
            jumped.append(ahead.status_code)

    with (
        DroppingProxy(native_service.port, on_request=jump_the_queue) as holding,
        front_on(horde_stores, [holding.url], **BUDGET) as front,
        serve() as worker,
        openai.OpenAI(base_url=front.url + "/v1", api_key=ANONYMOUS_API_KEY) as anonymous,
    ):
        worker.pause()  # online and free, taking nothing
        error = refused_chat(
            anonymous, max_tokens=16, extra_body={"horde": {"availability_mode": "fail_fast"}}
        )
    assert jumped == [202]
    assert error.body["code"] == "queue_unavailable"  # type: ignore[index]
    assert "estimated wait" in error.message
    assert [row.cancelled for row in rows(native_db) if row.user_id != requester.id] == [True]


def test_each_client_request_gets_a_fresh_operation_key(
    serve: Callable[..., ChatTestWorker],
    client: openai.OpenAI,
    proxy: DroppingProxy,
    native_db: sessionmaker[Session],
    requester: MadeUser,
) -> None:
    """Only the front's own repeat of a submit reuses its key (design doc: "A separate
    front woken by Redis"): the same body sent twice by a client is two requests, two
    keys, two charges."""
    with serve(replying(content="Hi")):
        for _ in range(2):
            client.chat.completions.create(model=MODEL, messages=MESSAGES)  # type: ignore[arg-type]
    keys = [split(sent)[0]["x-operation-key"] for sent in proxy.sent(SUBMIT)]
    assert len(keys) == len(set(keys)) == 2
    assert len(rows(native_db)) == 2
    charges = [d for reason, d in ledger(native_db, requester.id) if reason == "charge"]
    assert len(charges) == 2


def test_a_body_slower_than_its_deadline_is_408(
    horde_stores: EmbeddedStores, proxy: DroppingProxy
) -> None:
    """A body not whole within body_timeout is refused 408 body_read_timeout in OpenAI's
    envelope, nothing submitted (design doc: the front's Admitted -> Refused). The timeout
    is 1 s here, not the shipped 30 s, so the test does not wait half a minute."""
    with front_on(horde_stores, [proxy.url], body_timeout=1.0) as front:
        host, port = front.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as connection:
            connection.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: front\r\n"
                b"content-type: application/json\r\ncontent-length: 200\r\n\r\n"
                b'{"model": "' + MODEL.encode()
            )
            answer = b""
            while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
                chunk = connection.recv(65536)
                assert chunk, answer
                answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), head
    error = json.loads(body)
    assert_error(error)
    assert error["error"]["code"] == "body_read_timeout"
    assert not proxy.sent(SUBMIT)


@pytest.mark.parametrize(
    ("refusing_root", "drops"), [(False, 1), (True, 2)], ids=["lossy-roots", "a-root-refuses"]
)
def test_lost_submit_response_is_recovered_with_the_same_key(
    horde_stores: EmbeddedStores,
    native_service: NativeService,
    serve: Callable[..., ChatTestWorker],
    requester: MadeUser,
    native_db: Any,
    refusing_root: bool,
    drops: int,
) -> None:
    """A lost answer is repeated with the same bytes and key, on the next root. A root that
    refuses (a native API that stopped) never saw the submit and costs no attempt: beside
    it, the root still serving loses two answers and takes the third try (counting the
    refusals too, the try after the second loss went to the stopped root, and 502)."""
    roots = [_refusing_root()] if refusing_root else []
    with (
        DroppingProxy(native_service.port, drop=SUBMIT, times=drops) as lossy,
        front_on(horde_stores, [*roots, lossy.url, lossy.url][:2]) as front,
        serve(),
        openai.OpenAI(base_url=front.url + "/v1", api_key=requester.api_key) as sdk,
    ):
        completion = sdk.chat.completions.create(model=MODEL, messages=MESSAGES)
    (row,) = rows(native_db)  # the repeats were answered with the request already queued
    assert completion.id == f"chatcmpl-{row.id}"
    assert lossy.dropped == drops
    # every try the same body and key (the native API's submit limit may hold one more)
    tries = [split(request) for request in lossy.sent(SUBMIT)]
    assert len(tries) > drops
    assert len({body for _, body in tries}) == 1
    assert len({headers["x-operation-key"] for headers, _ in tries}) == 1
    with native_db() as session:
        assert len(session.scalars(select(OperationKey)).all()) == 1


def _refusing_root() -> str:
    """A root nothing listens on: every connection to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_submit_lost_every_time_is_502_and_not_retried(
    horde_stores: EmbeddedStores,
    native_service: NativeService,
    serve: Callable[..., ChatTestWorker],
    requester: MadeUser,
    native_db: Any,
) -> None:
    with (
        DroppingProxy(native_service.port, drop=SUBMIT, times=10) as lossy,
        front_on(horde_stores, [lossy.url]) as front,
        serve() as worker,
        openai.OpenAI(base_url=front.url + "/v1", api_key=requester.api_key) as sdk,
    ):
        worker.pause()
        error = refused_chat(sdk)
    assert (error.status_code, error.code) == (502, "horde_unavailable")
    assert error.response.headers["x-should-retry"] == "false"  # the Horde may hold it
    submits = [split(request) for request in lossy.sent(SUBMIT)]
    assert len(submits) == 3
    keys = {h["x-operation-key"] for h, _ in submits}
    assert len(keys) == 1
    (orphan,) = rows(native_db)  # one request at most, and the front cancelled it by its key
    assert orphan.cancelled
    assert lossy.sent(b"DELETE /api/v2/generate/chat/operation/" + keys.pop().encode())


@pytest.fixture
def deaf_redis() -> Iterator[EmbeddedRedis]:
    """A second, separate Redis server: nothing the native API publishes reaches it."""
    with running_redis("horde-deaf-redis-") as server:
        yield server


def test_lost_signal_still_completes_through_the_poll(
    deaf_redis: EmbeddedRedis,
    proxy: DroppingProxy,
    serve: Callable[..., ChatTestWorker],
    requester: MadeUser,
) -> None:
    def answer_once_waited(job: dict[str, Any]) -> dict[str, Any]:
        until(lambda: proxy.sent(STATUS), "the front's first status read")  # it waits now
        return {"content": "Found by polling."}

    with (
        running_front(
            deaf_redis.url, [proxy.url], service_passkey=SERVICE_PASSKEY, **FAST
        ) as front,
        serve(answer_once_waited),
        openai.OpenAI(base_url=front.url + "/v1", api_key=requester.api_key) as sdk,
    ):
        completion = sdk.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert completion.choices[0].message.content == "Found by polling."
    assert len(proxy.sent(STATUS)) >= 2


def test_client_disconnect_cancels(
    serve: Callable[..., ChatTestWorker], front_url: str, requester: MadeUser, native_db: Any
) -> None:
    with serve() as worker:
        worker.pause()
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                front_url + "/v1/chat/completions",
                headers={"Authorization": f"Bearer {requester.api_key}"},
                json={"model": MODEL, "messages": MESSAGES},
                timeout=httpx.Timeout(10, read=0.8),
            )
        until(lambda: [r.cancelled for r in rows(native_db)] == [True], "the cancel")


@pytest.mark.parametrize("front_options", [DEADLINE])
def test_error_after_stream_headers_is_one_error_event_then_done(
    serve: Callable[..., ChatTestWorker],
    front_url: str,
    client: openai.OpenAI,
    requester: MadeUser,
    native_db: Any,
) -> None:
    with serve() as worker:
        worker.pause()
        with httpx.stream(
            "POST",
            front_url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {requester.api_key}"},
            json={"model": MODEL, "messages": MESSAGES, "stream": True},
            timeout=10,
        ) as response:
            assert response.status_code == 200
            lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        assert len(lines) == 2
        event = json.loads(lines[0][len("data: ") :])
        assert_error(event)
        assert "choices" not in event
        assert event["error"]["code"] == "deadline_exceeded"
        assert [row.cancelled for row in rows(native_db)] == [True]
        with pytest.raises(openai.APIError, match="deadline"):
            list(client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True))
