"""Delta streaming end to end: the openai SDK streams from the live front, over the
live native API (embedded Postgres and Redis), while the real chat worker serves from the
OpenAI backend double, whose scripted chunk pauses make the timing. Every chunk and error
event is checked against OpenAI's schema; the ledger is read from Postgres."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import pytest
from redis import Redis
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from generated import streaming as S
from runtime.contract.pricing import output_estimate
from runtime.native.accounts import kudos
from runtime.native.db.tables import Generation, WaitingPrompt, Worker
from runtime.native.progress.protocol import posted_text
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from runtime.worker.cli import RunningWorker
from runtime.worker.config import WorkerConfig
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.doubles.backend_script import Reply
from tests.doubles.openai_backend import OpenAIBackendDouble
from tests.integration.chat_flow import chat_status
from tests.integration.native_flow import ledger
from tests.support.chat_worker import ChatTestWorker
from tests.support.dropping_proxy import DroppingProxy
from tests.support.front import running_front
from tests.support.openai_schema import assert_chunk, assert_error, assert_response_event
from tests.support.waiting import until
from tests.support.workers import until_listed

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

MODEL = "delta-model"
CONTEXT = 16384
MESSAGES: list[Any] = [{"role": "user", "content": "Tell me a story"}]
FRONT = {
    "poll_interval": 0.5,
    "grace": 5.0,
    "deadline": 60.0,
    "queue_info_wait": 0.5,
    "keepalive_interval": 0.2,
}
QUEUED = r": queued: position \d+, estimated wait \d+ s"


@pytest.fixture
def backend() -> Iterator[OpenAIBackendDouble]:
    with OpenAIBackendDouble(model=MODEL, default_reply=Reply(content="OK")) as double:
        yield double


@pytest.fixture
def front(
    horde_stores: EmbeddedStores, native_service: NativeService, native_db: Any
) -> Iterator[str]:
    with running_front(
        horde_stores.redis_url, [native_service.url], service_passkey=SERVICE_PASSKEY, **FRONT
    ) as service:
        yield service.url


@pytest.fixture
def sdk(front: str, requester: MadeUser) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=front + "/v1", api_key=requester.api_key, max_retries=0) as c:
        yield c


@pytest.fixture
def redis(native_service: NativeService) -> Redis:
    return native_service.context.redis


@contextmanager
def real_worker(
    horde_url: str,
    owner: MadeUser,
    backend: OpenAIBackendDouble,
    native_client: httpx.Client,
    reply: Reply,
) -> Iterator[RunningWorker]:
    """``horde-chat worker`` as the CLI starts it (probe, loop, progress posts); ``reply``
    is what the backend answers the job with (scripted after the probe's calls)."""
    config = WorkerConfig(
        horde_url,
        owner.api_key,
        backend.openai_base_url,
        name="delta-worker",
        context=CONTEXT,
        chat_only=True,
        poll_interval=0.05,
    )
    worker = RunningWorker.start(config)
    backend.script(reply)
    try:
        until_listed(native_client)
        yield worker
    finally:
        worker.stop(grace=5)


def request_id_of(chunk: dict[str, Any]) -> str:
    return str(chunk["id"]).removeprefix("chatcmpl-")


def sse_data(line: str) -> dict[str, Any] | None:
    """The JSON of a data line (schema-checked), None for [DONE] or any other line."""
    if not line.startswith("data: ") or line == "data: [DONE]":
        return None
    payload = dict(json.loads(line.removeprefix("data: ")))
    if "error" in payload:
        assert_error(payload)
    else:
        assert_chunk(payload)
    return payload


def content_of(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or []
    return str(choices[0]["delta"].get("content") or "") if choices else ""


def text_of(chunks: list[dict[str, Any]]) -> str:
    """The content the chunks carry, joined."""
    return "".join(content_of(c) for c in chunks)


def streamed(sdk: openai.OpenAI) -> list[dict[str, Any]]:
    """Every chunk of one streamed chat request for MESSAGES, as dicts."""
    stream = sdk.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
    return [c.to_dict() for c in stream]


def delta_entries(redis: Redis, request_id: str) -> list[dict[str, str]]:
    entries = redis.xrange(S.STREAM_KEY.of(request_id))  # type: ignore[union-attr]
    return [fields for _id, fields in entries if fields[S.ENTRY_KIND] == S.KIND_DELTA]


def words(count: int) -> list[str]:
    return [f"word{i} " for i in range(count)]


@pytest.mark.raised_limits(
    "chat_status",
    why="it reads the request's status at every chunk it gets, to see the job still held",
)
def test_text_arrives_in_chunks_before_the_job_is_submitted(
    sdk: openai.OpenAI,
    backend: OpenAIBackendDouble,
    owner: MadeUser,
    native_service: NativeService,
    native_client: httpx.Client,
    redis: Redis,
) -> None:
    pieces = words(16)
    reply = Reply(content="".join(pieces), chunks=pieces, chunk_delay=0.25)
    chunks: list[dict[str, Any]] = []
    unsubmitted: list[str] = []  # content that reached the client while the job was held
    with (
        real_worker(native_service.url, owner, backend, native_client, reply),
        sdk.chat.completions.with_streaming_response.create(
            model=MODEL,
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        ) as response,
    ):
        for line in response.iter_lines():
            chunk = sse_data(line)
            if chunk is None:
                continue
            chunks.append(chunk)
            text = content_of(chunk)
            if text and not chunk["choices"][0]["finish_reason"]:
                status = chat_status(native_client, request_id_of(chunk))
                if status["finished"] == 0 and status["processing"] == 1:
                    unsubmitted.append(text)
    request_id = request_id_of(chunks[0])
    assert text_of(chunks) == "".join(pieces)
    assert len(unsubmitted) >= 3, unsubmitted  # several chunks while the worker generated
    assert len(delta_entries(redis, request_id)) >= 2  # posted about once a second
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert {c["model"] for c in chunks} == {MODEL}
    assert {c["id"] for c in chunks} == {f"chatcmpl-{request_id}"}
    finish, usage = chunks[-2], chunks[-1]
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] > 0
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chat_status(native_client, request_id)["finished"] == 1


def test_pacing_spreads_one_post_over_several_chunks(
    sdk: openai.OpenAI,
    backend: OpenAIBackendDouble,
    owner: MadeUser,
    native_service: NativeService,
    native_client: httpx.Client,
    redis: Redis,
) -> None:
    pieces = [
        "The first long sentence arrives at once from the backend. ",
        "A second one comes a good while later, in one lump as well. ",
        "The third one closes the reply.",
    ]
    reply = Reply(content="".join(pieces), chunks=pieces, chunk_delay=1.2)
    with real_worker(native_service.url, owner, backend, native_client, reply):
        received = streamed(sdk)
    for chunk in received:
        assert_chunk(chunk)
    texts = [content_of(c) for c in received if content_of(c)]
    assert "".join(texts) == "".join(pieces)
    posts = [e[S.ENTRY_DELTA] for e in delta_entries(redis, request_id_of(received[0]))]
    assert posts
    assert "".join(posts) == "".join(pieces)[: len("".join(posts))]
    assert len(texts[0]) < len(posts[0])  # the first post was cut into pieces
    assert len(texts) >= 2 * len(posts)


def test_a_lost_acknowledgement_resyncs_without_repeating_text(
    sdk: openai.OpenAI,
    backend: OpenAIBackendDouble,
    owner: MadeUser,
    native_service: NativeService,
    native_client: httpx.Client,
    redis: Redis,
) -> None:
    pieces = words(14)
    reply = Reply(content="".join(pieces), chunks=pieces, chunk_delay=0.3)
    drop = b"POST /api/v2/generate/text/progress"
    with (
        DroppingProxy(native_service.port, drop=drop, times=1) as proxy,
        real_worker(proxy.url, owner, backend, native_client, reply),
    ):
        received = streamed(sdk)
    assert proxy.dropped == 1  # the first post landed, its acknowledgement was lost
    assert text_of(received) == "".join(pieces)
    entries = delta_entries(redis, request_id_of(received[0]))
    assert [int(e[S.ENTRY_SEQ]) for e in entries] == list(range(len(entries)))
    assert len(entries) >= 2  # the retry of seq 0 got 409 and went on as seq 1
    posted = "".join(e[S.ENTRY_DELTA] for e in entries)
    assert "".join(pieces).startswith(posted)  # nothing posted twice


def test_posts_stop_at_the_cap_and_the_reply_still_arrives_whole(
    sdk: openai.OpenAI,
    backend: OpenAIBackendDouble,
    owner: MadeUser,
    native_service: NativeService,
    native_client: httpx.Client,
    redis: Redis,
) -> None:
    piece = "x" * 4999 + " "
    pieces = [piece] * (S.GENERATION_CHARS // len(piece) + 4)
    content = "".join(pieces)
    reply = Reply(content=content, chunks=pieces, chunk_delay=0.1)
    with real_worker(native_service.url, owner, backend, native_client, reply):
        received = streamed(sdk)
    request_id = request_id_of(received[0])
    posted = posted_text(redis, request_id)
    assert 0 < len(posted) <= S.GENERATION_CHARS < len(content)  # a post went over: 413
    assert text_of(received) == content  # the submit completed it
    assert received[-1]["choices"][0]["finish_reason"] == "stop"
    assert chat_status(native_client, request_id)["generations"][0]["content"] == content


def test_a_client_leaving_mid_stream_cancels_and_settles_on_the_posted_text(
    front: str,
    requester: MadeUser,
    owner: MadeUser,
    backend: OpenAIBackendDouble,
    native_service: NativeService,
    native_client: httpx.Client,
    native_db: sessionmaker[Session],
    redis: Redis,
) -> None:
    pieces = words(60)
    reply = Reply(content="".join(pieces), chunks=pieces, chunk_delay=0.2)
    body = {"model": MODEL, "messages": MESSAGES, "stream": True}
    headers = {"Authorization": f"Bearer {requester.api_key}"}
    with real_worker(native_service.url, owner, backend, native_client, reply) as worker:
        submits: list[dict[str, Any]] = []
        delivered = worker.horde.submit
        worker.horde.submit = lambda b: submits.append(b) or delivered(b)  # type: ignore[method-assign]
        received = ""
        with httpx.stream(
            "POST", front + "/v1/chat/completions", json=body, headers=headers, timeout=30
        ) as response:
            for line in response.iter_lines():
                chunk = sse_data(line)
                if chunk is not None:
                    request_id = request_id_of(chunk)
                    received += content_of(chunk)
                if len(received) > 20:
                    break  # the client leaves with the stream open
        job = uuid.UUID(request_id)

        def settled() -> Generation | None:
            with native_db() as session:
                gen = session.scalars(select(Generation).where(Generation.wp_id == job)).one()
                return gen if gen.cancelled and gen.generation is not None else None

        generation = until(settled, "the settlement of the cancelled generation")
        until(lambda: worker.loop.served == 1, "the worker's stop on cancelled: true")
    posted = posted_text(redis, request_id)
    assert received
    assert posted.startswith(received)
    assert generation.generation == posted
    assert generation.state == "ok"
    assert not generation.faulted
    assert not generation.aborted
    assert submits == []  # the worker stopped without submitting
    with native_db() as session:
        wp = session.get(WaitingPrompt, job)
        assert wp is not None
        assert wp.cancelled
        assert not wp.faulted
        tokens = output_estimate({S.STREAMED_REPLY_PART: posted}, wp.max_length)
        price = kudos.request_reward(wp, tokens, MODEL, trusted=False, bridge_agent="")
        worker_row = session.scalars(select(Worker)).one()
        assert worker_row.aborted_jobs == 0
    assert ledger(native_db, owner.id) == [("reward", price)]
    assert ("charge", -price) in ledger(native_db, requester.id)


def test_a_divergent_final_reply_ends_with_one_error_event(
    front: str, sdk: openai.OpenAI, requester: MadeUser, native_url: str, owner: MadeUser
) -> None:
    def respond(job: dict[str, Any]) -> dict[str, Any]:
        assert job["stream"] is True
        body = {"id": job["id"], "seq": 0, "delta": "Hello wor"}
        posted = worker.client.post("/generate/text/progress", json=body)
        assert posted.status_code == 200, posted.text
        return {"content": "Goodbye.", "finish_reason": "stop"}

    body = {"model": MODEL, "messages": MESSAGES, "stream": True}
    headers = {"Authorization": f"Bearer {requester.api_key}"}
    with ChatTestWorker(native_url, owner.api_key, model=MODEL, respond=respond) as worker:
        with httpx.stream(
            "POST", front + "/v1/chat/completions", json=body, headers=headers, timeout=30
        ) as response:
            lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        with pytest.raises(openai.APIError, match="does not extend"):
            list(sdk.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True))
    assert [line for line in lines if line][-1] == "data: [DONE]"
    events = [sse_data(line) for line in lines[:-1]]
    *chunks, error = events
    assert error is not None
    assert "choices" not in error
    assert error["error"]["code"] == "stream_diverged"
    assert "".join(content_of(c) for c in chunks if c) == "Hello wor"
    assert all(c and c["choices"][0]["finish_reason"] is None for c in chunks)


def test_keep_alive_comments_say_the_queue_position_while_queued(
    front: str, requester: MadeUser, native_url: str, owner: MadeUser
) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "stream": True}
    headers = {"Authorization": f"Bearer {requester.api_key}"}
    with ChatTestWorker(native_url, owner.api_key, model=MODEL) as worker:
        worker.pause()
        lines: list[str] = []
        with httpx.stream(
            "POST", front + "/v1/chat/completions", json=body, headers=headers, timeout=30
        ) as response:
            for line in response.iter_lines():
                lines.append(line)
                if len([x for x in lines if x.startswith(":")]) == 3:
                    worker.resume()
    first_data = next(i for i, line in enumerate(lines) if line.startswith("data: "))
    comments = [line for line in lines[:first_data] if line]
    queued = [
        c for c in comments if re.fullmatch(r": queued: position \d+, estimated wait \d+ s", c)
    ]
    assert len(queued) >= 3
    assert set(comments) - set(queued) <= {": a worker is generating the reply"}
    chunks = [c for c in map(sse_data, lines) if c]
    assert text_of(chunks) == "You said: Tell me a story"
    assert [line for line in lines if line][-1] == "data: [DONE]"


REASONING = "The user wants a story. A short one will do."
ANSWER = "Once upon a time there was a horde. The end."


def reasoning_of(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or []
    return str(choices[0]["delta"].get("reasoning_content") or "") if choices else ""


def test_a_think_block_streams_as_reasoning_content_then_content_without_divergence(
    sdk: openai.OpenAI,
    backend: OpenAIBackendDouble,
    owner: MadeUser,
    native_service: NativeService,
    native_client: httpx.Client,
    redis: Redis,
) -> None:
    # The backend puts the reasoning in the content as a <think> block, word by word, as
    # koboldcpp and llama.cpp templates without a reasoning parser do.
    reply = Reply(content=ANSWER, reasoning_content=REASONING, think_tags=True, chunk_delay=0.15)
    with real_worker(native_service.url, owner, backend, native_client, reply):
        received = [
            c.to_dict()
            for c in sdk.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
        ]
        backend.script(reply)
        whole = sdk.chat.completions.create(model=MODEL, messages=MESSAGES).to_dict()
    for chunk in received:
        assert_chunk(chunk)
    kinds = [
        "reasoning" if reasoning_of(c) else "content"
        for c in received
        if reasoning_of(c) or content_of(c)
    ]
    assert kinds[0] == "reasoning"
    assert "reasoning" not in kinds[kinds.index("content") :]  # reasoning, then content
    assert received[-1]["choices"][0]["finish_reason"] == "stop"  # no stream_diverged
    assert "".join(reasoning_of(c) for c in received) == REASONING
    assert text_of(received) == ANSWER
    assert text_of(received) == whole["choices"][0]["message"]["content"]
    assert whole["choices"][0]["message"]["reasoning_content"] == REASONING
    entries = delta_entries(redis, request_id_of(received[0]))
    posted_reasoning = "".join(e.get(S.ENTRY_REASONING, "") for e in entries)
    assert posted_reasoning  # reasoning was relayed as progress, not only in the reply
    assert REASONING.startswith(posted_reasoning)
    assert all("<think>" not in e[S.ENTRY_DELTA] for e in entries)


def test_include_reasoning_false_sends_no_reasoning_chunk_in_a_relayed_stream(
    sdk: openai.OpenAI,
    backend: OpenAIBackendDouble,
    owner: MadeUser,
    native_service: NativeService,
    native_client: httpx.Client,
    redis: Redis,
) -> None:
    reply = Reply(content=ANSWER, reasoning_content=REASONING, think_tags=True, chunk_delay=0.15)
    with real_worker(native_service.url, owner, backend, native_client, reply):
        received = [
            c.to_dict()
            for c in sdk.chat.completions.create(
                model=MODEL,
                messages=MESSAGES,
                stream=True,
                extra_body={"horde": {"include_reasoning": False}},
            )
        ]
    for chunk in received:
        assert_chunk(chunk)
    assert [
        c for c in received if "reasoning_content" in (c.get("choices") or [{}])[0].get("delta", {})
    ] == []
    assert text_of(received) == ANSWER
    assert received[-1]["choices"][0]["finish_reason"] == "stop"
    request_id = request_id_of(received[0])
    assert "".join(e.get(S.ENTRY_REASONING, "") for e in delta_entries(redis, request_id))
    status = chat_status(native_client, request_id)
    assert status["generations"][0]["reasoning_content"] == REASONING  # the native status shows it


@pytest.mark.raised_limits(
    "chat_status",
    why="it reads the request's status at every delta it gets, to see the job still held",
)
def test_a_streamed_response_relays_reasoning_and_text_while_the_worker_generates(
    sdk: openai.OpenAI,
    backend: OpenAIBackendDouble,
    owner: MadeUser,
    native_service: NativeService,
    native_client: httpx.Client,
    redis: Redis,
) -> None:
    """The Responses API's stream reads the same relay: response.reasoning_text.delta then
    response.output_text.delta events while the job is held, then response.completed."""
    reply = Reply(content=ANSWER, reasoning_content=REASONING, think_tags=True, chunk_delay=0.15)
    events: list[dict[str, Any]] = []
    unsubmitted: list[str] = []  # text deltas that reached the client while the job was held
    with real_worker(native_service.url, owner, backend, native_client, reply):
        stream = sdk.responses.create(model=MODEL, input="Tell me a story", stream=True)
        for event in stream:
            events.append(event.to_dict())
            assert_response_event(events[-1])
            if event.type == "response.output_text.delta":
                request_id = str(events[0]["response"]["id"]).removeprefix("resp_")
                status = chat_status(native_client, request_id)
                if status["finished"] == 0 and status["processing"] == 1:
                    unsubmitted.append(event.delta)
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "response.completed"
    thought = [e["delta"] for e in events if e["type"] == "response.reasoning_text.delta"]
    text = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert ("".join(thought), "".join(text)) == (REASONING, ANSWER)
    assert kinds.index("response.output_text.delta") > max(
        i for i, kind in enumerate(kinds) if kind == "response.reasoning_text.delta"
    )
    assert len(unsubmitted) >= 2, unsubmitted  # relayed while the worker generated
    request_id = str(events[-1]["response"]["id"]).removeprefix("resp_")
    assert len(delta_entries(redis, request_id)) >= 2
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    assert final["output"][1]["content"][0]["text"] == ANSWER
