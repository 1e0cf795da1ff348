"""runtime.front.stream_events: keep-alive comments between chunks, their queue note, and
the model named in chunks before the reply."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from runtime.front.stream_events import keep_alive, queue_note, stream_model


def test_the_model_comes_from_the_status_then_the_request() -> None:
    landed = {"generations": [{"model": "served-by"}]}
    assert stream_model(landed, {"model": "asked"}) == "served-by"
    assert stream_model({"generations": []}, {"model": "asked"}) == "asked"
    assert stream_model(None, {"models": ["only-one"]}) == "only-one"
    assert stream_model(None, {"models": ["a", "b"]}) == ""  # not known before the reply


def test_the_queue_note_says_position_and_wait() -> None:
    assert queue_note(None) == "waiting for the Horde"
    queued = {"processing": 0, "queue_position": 4, "wait_time": 37}
    assert queue_note(queued) == "queued: position 4, estimated wait 37 s"
    assert queue_note({"processing": 1, "queue_position": 0}) == "a worker is generating the reply"


def test_keep_alive_comments_say_no_eligible_worker_rather_than_a_queue_position() -> None:
    """A request no worker can take is not at "position 0, estimated wait 0 s"."""
    impossible = {"processing": 0, "queue_position": 0, "wait_time": 0, "is_possible": False}
    assert queue_note(impossible) == "queued: no eligible worker is online yet"
    no_threads = {"processing": 0, "queue_position": 0, "is_possible": True, "eligible_threads": 0}
    assert queue_note(no_threads) == "queued: no eligible worker is online yet"
    takeable = {"queue_position": 2, "wait_time": 5, "is_possible": True, "eligible_threads": 1}
    assert queue_note(takeable) == "queued: position 2, estimated wait 5 s"


async def _comments_while_silent() -> tuple[list[bytes], bool]:
    release = asyncio.Event()
    closed = False

    async def items() -> AsyncIterator[bytes]:
        nonlocal closed
        try:
            yield b"data: first\n\n"
            await release.wait()
            yield b"data: second\n\n"
            await asyncio.Event().wait()  # never ends: the consumer closes the stream
        finally:
            closed = True

    seen: list[bytes] = []
    stream = keep_alive(items(), 0.01, lambda: "queued: position 2")
    async for data in stream:
        seen.append(data)
        if sum(d.startswith(b":") for d in seen) == 3:
            release.set()
        if data == b"data: second\n\n":
            break
    await stream.aclose()
    return seen, closed


def test_keep_alive_comments_fill_the_silence_and_closing_closes_the_source() -> None:
    seen, closed = asyncio.run(_comments_while_silent())
    assert seen[0] == b"data: first\n\n"
    assert seen[-1] == b"data: second\n\n"
    comments = seen[1:-1]
    assert len(comments) >= 3
    assert set(comments) == {b": queued: position 2\n\n"}
    assert closed  # the pending read was cancelled and the source closed
