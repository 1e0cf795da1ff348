"""The front's relay (runtime.front.progress_stream) reading a real Redis stream that the
native side (runtime.native.progress.protocol) writes: entries arrive while the generation runs,
a relay resumes after an entry id, ends at the generation's end entry, and drains on stop;
delta_events feeds the front's chunk_stream (chunks checked against OpenAI's schema)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from generated.errors import StreamDiverged
from runtime.front.progress_stream import RelayedDelta, delta_events, paced_relay, relay
from runtime.front.responses import Reply
from runtime.front.sse import chunk_stream
from runtime.native.accounts.keys import hash_key
from runtime.native.progress.protocol import (
    finish,
    mark_cancelled,
    mark_ended,
    post_progress,
    write_lease,
)
from runtime.stores.embedded import EmbeddedStores
from runtime.stores.redis_client import redis_client
from tests.support.openai_schema import assert_chunk

pytestmark = pytest.mark.integration

OWNER = hash_key("worker-key")
T = TypeVar("T")


@pytest.fixture
def redis(horde_stores: EmbeddedStores) -> Iterator[Redis]:
    client = redis_client(horde_stores.redis_url)
    yield client
    client.close()


def leased(redis: Redis, request_id: str) -> str:
    generation_id = str(uuid.uuid4())
    write_lease(redis, generation_id, request_id, OWNER, 150)
    return generation_id


async def within(awaitable: asyncio.Future[T] | asyncio.Task[T], seconds: float = 10) -> T:
    return await asyncio.wait_for(awaitable, seconds)


def run_with_async_redis(url: str, body: Callable[[AsyncRedis], Awaitable[T]]) -> T:
    async def main() -> T:
        client = AsyncRedis.from_url(url, decode_responses=True)
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


def test_entries_are_relayed_as_they_arrive(redis: Redis, horde_stores: EmbeddedStores) -> None:
    request_id = str(uuid.uuid4())
    generation_id = leased(redis, request_id)

    async def body(client: AsyncRedis) -> list[str]:
        stream: AsyncIterator[RelayedDelta] = relay(client, request_id)
        seen: list[str] = []
        for seq, text in enumerate(["Once ", "upon ", "a time"]):
            post_progress(redis, generation_id, OWNER, seq, text)
            delta = await within(anext(stream))
            # Each post is read before the next one exists and before any submit.
            assert (delta.text, delta.generation_id) == (text, generation_id)
            seen.append(delta.text)
        finish(redis, generation_id)
        rest = [d async for d in stream]
        assert rest == []
        return seen

    assert run_with_async_redis(horde_stores.redis_url, body) == ["Once ", "upon ", "a time"]


def test_a_relay_resumes_after_an_entry_id(redis: Redis, horde_stores: EmbeddedStores) -> None:
    request_id = str(uuid.uuid4())
    generation_id = leased(redis, request_id)
    for seq, text in enumerate(["a", "b", "c"]):
        post_progress(redis, generation_id, OWNER, seq, text)
    finish(redis, generation_id)

    async def body(client: AsyncRedis) -> tuple[list[str], list[str]]:
        everything = [d async for d in relay(client, request_id)]
        resumed = [d async for d in relay(client, request_id, last_id=everything[0].entry_id)]
        return [d.text for d in everything], [d.text for d in resumed]

    assert run_with_async_redis(horde_stores.redis_url, body) == (["a", "b", "c"], ["b", "c"])


def test_a_fault_before_any_text_is_skipped_and_one_after_text_ends_the_relay(
    redis: Redis, horde_stores: EmbeddedStores
) -> None:
    request_id = str(uuid.uuid4())
    silent = leased(redis, request_id)
    mark_ended(redis, silent)
    second = leased(redis, request_id)
    post_progress(redis, second, OWNER, 0, "partial")
    mark_ended(redis, second)
    third = leased(redis, request_id)
    post_progress(redis, third, OWNER, 0, "never relayed")

    async def body(client: AsyncRedis) -> list[tuple[str, str]]:
        return [(d.generation_id, d.text) async for d in relay(client, request_id)]

    assert run_with_async_redis(horde_stores.redis_url, body) == [(second, "partial")]


def test_a_cancel_ends_the_relay(redis: Redis, horde_stores: EmbeddedStores) -> None:
    request_id = str(uuid.uuid4())
    generation_id = leased(redis, request_id)
    post_progress(redis, generation_id, OWNER, 0, "Hello")
    mark_cancelled(redis, generation_id)

    async def body(client: AsyncRedis) -> list[str]:
        return [d.text async for d in relay(client, request_id)]

    assert run_with_async_redis(horde_stores.redis_url, body) == ["Hello"]


def test_stop_drains_what_is_left_and_returns(redis: Redis, horde_stores: EmbeddedStores) -> None:
    request_id = str(uuid.uuid4())
    generation_id = leased(redis, request_id)
    for seq, text in enumerate(["x", "y"]):
        post_progress(redis, generation_id, OWNER, seq, text)

    async def body(client: AsyncRedis) -> list[str]:
        stop = asyncio.Event()
        stop.set()  # the completion signal came before the relay read anything
        return [d.text async for d in relay(client, request_id, stop=stop)]

    # No end entry was written (the submit's finish may be lost): stop still ends it.
    assert run_with_async_redis(horde_stores.redis_url, body) == ["x", "y"]


def test_paced_relay_sends_every_character_in_order(
    redis: Redis, horde_stores: EmbeddedStores
) -> None:
    request_id = str(uuid.uuid4())
    generation_id = leased(redis, request_id)
    post_progress(redis, generation_id, OWNER, 0, "Hello, ")
    post_progress(redis, generation_id, OWNER, 1, "world")
    finish(redis, generation_id)

    async def body(client: AsyncRedis) -> list[str]:
        return [piece async for piece in paced_relay(client, request_id)]

    pieces = run_with_async_redis(horde_stores.redis_url, body)
    assert "".join(pieces) == "Hello, world"
    assert len(pieces) > 2  # each post spread over several pieces


def _reply(request_id: str, content: str) -> Reply:
    return Reply(request_id, "chat-model-7B", content, None, [], "stop")


def _chunks(url: str, request_id: str, final: str) -> list[dict[str, Any]]:
    async def body(client: AsyncRedis) -> list[dict[str, Any]]:
        async def reply() -> Reply:
            return _reply(request_id, final)

        request = {"stream": True, "stream_options": {"include_usage": True}}
        events = delta_events(client, request_id, reply)
        return [c async for c in chunk_stream(events, request_id, request)]

    return run_with_async_redis(url, body)


def test_delta_events_relay_then_reconcile_with_the_final_reply(
    redis: Redis, horde_stores: EmbeddedStores
) -> None:
    request_id = str(uuid.uuid4())
    generation_id = leased(redis, request_id)
    post_progress(redis, generation_id, OWNER, 0, "Hello, ")
    post_progress(redis, generation_id, OWNER, 1, "wor")
    finish(redis, generation_id)

    chunks = _chunks(horde_stores.redis_url, request_id, "Hello, world!")
    for chunk in chunks:
        assert_chunk(chunk)
    contents = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    texts = [t for t in contents if t]
    assert "".join(texts) == "Hello, world!"
    assert len(texts) > 3  # paced pieces, then the rest of the final reply
    assert texts[-1] == "ld!"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] is not None


def test_delta_events_end_with_divergence_when_the_final_reply_differs(
    redis: Redis, horde_stores: EmbeddedStores
) -> None:
    request_id = str(uuid.uuid4())
    generation_id = leased(redis, request_id)
    post_progress(redis, generation_id, OWNER, 0, "Hello")
    mark_ended(redis, generation_id)  # a fault; another worker answers differently

    with pytest.raises(StreamDiverged):
        _chunks(horde_stores.redis_url, request_id, "Goodbye")


class _FrozenClock:
    """A clock on which no time passes: a paced sleep never returns."""

    def now(self) -> float:
        return 0.0

    async def sleep(self, seconds: float) -> None:
        await asyncio.Event().wait()


def test_pacing_never_delays_the_end_of_a_stream_once_the_whole_reply_is_known(
    redis: Redis, horde_stores: EmbeddedStores
) -> None:
    """Once the final reply is known the relay ends and what is left of the last
    post goes out at once, then the finish and usage chunks: on a clock where no time passes
    the stream still ends, every character in order."""
    request_id = str(uuid.uuid4())
    generation_id = leased(redis, request_id)
    post_progress(redis, generation_id, OWNER, 0, "Hello, ")
    post_progress(redis, generation_id, OWNER, 1, "world")
    finish(redis, generation_id)

    async def body(client: AsyncRedis) -> list[dict[str, Any]]:
        async def reply() -> Reply:
            return _reply(request_id, "Hello, world!")

        request = {"stream": True, "stream_options": {"include_usage": True}}
        events = delta_events(client, request_id, reply, clock=_FrozenClock())
        chunks = chunk_stream(events, request_id, request)
        return await within(asyncio.ensure_future(_collect(chunks)))

    chunks = run_with_async_redis(horde_stores.redis_url, body)
    contents = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert "".join(t for t in contents if t) == "Hello, world!"
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] is not None


async def _collect(chunks: AsyncIterator[Any]) -> list[dict[str, Any]]:
    return [dict(c) async for c in chunks]
