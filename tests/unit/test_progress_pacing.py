"""Pacing and reconciliation of relayed deltas (runtime.front.progress_stream), on a fake
clock: time only moves when the test advances it, so nothing depends on the wall clock."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from generated import streaming as S
from runtime.front.progress_stream import next_estimate, paced, plan, reconcile, split_evenly

CHUNK = 0.1


class FakeClock:
    """now() is virtual; sleep() returns when advance() passes its deadline."""

    def __init__(self) -> None:
        self.t = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.t + seconds, next(self._order), future))
        await future

    async def advance_to(self, target: float) -> None:
        await settle()
        while self._sleepers and self._sleepers[0][0] <= target + 1e-9:
            due, _, future = heapq.heappop(self._sleepers)
            self.t = max(self.t, due)
            if not future.done():
                future.set_result(None)
            await settle()
        self.t = target
        await settle()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


class Posts:
    """A source of post texts the test feeds at chosen (virtual) times."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()

    async def texts(self) -> AsyncIterator[str]:
        while (text := await self.queue.get()) is not None:
            yield text


Scenario = Callable[[FakeClock, Posts], Awaitable[None]]


def run(scenario: Scenario) -> list[tuple[float, str]]:
    """(virtual time, piece) of everything ``paced`` sent while ``scenario`` ran."""

    async def main() -> list[tuple[float, str]]:
        clock, posts = FakeClock(), Posts()
        sent: list[tuple[float, str]] = []

        async def consume() -> None:
            async for piece in paced(posts.texts(), clock, first_interval=1.0, chunk_seconds=CHUNK):
                sent.append((round(clock.now(), 6), piece))

        consumer = asyncio.ensure_future(consume())
        await scenario(clock, posts)
        await asyncio.wait_for(consumer, 5)
        return sent

    return asyncio.run(main())


def test_split_evenly_keeps_every_character() -> None:
    assert split_evenly("abcdefg", 3) == ["abc", "de", "fg"]
    assert split_evenly("ab", 5) == ["a", "b"]
    assert split_evenly("héllo wörld", 4) == ["hél", "lo ", "wör", "ld"]


def test_plan_spreads_a_post_over_the_interval() -> None:
    assert plan("abcdefghij", 1.0, 0.1) == [(i * 0.1, c) for i, c in enumerate("abcdefghij")]
    two = plan("abcdef", 0.2, 0.1)
    assert [piece for _, piece in two] == ["abc", "def"]
    assert [offset for offset, _ in two] == [0.0, 0.1]
    assert plan("abc", 0.01, 0.1) == [(0.0, "abc")]
    assert plan("", 1.0, 0.1) == []


def test_estimate_follows_the_posts_within_bounds() -> None:
    assert next_estimate(1.0, 0.5, smoothing=0.5, max_interval=2.0) == 0.75
    assert next_estimate(1.0, 30.0, smoothing=0.5, max_interval=2.0) == 2.0
    assert next_estimate(1.0, -1.0, smoothing=1.0, max_interval=2.0) == 0.0
    assert next_estimate(1.0, 1.0) <= S.PACING_MAX_INTERVAL_SECONDS


def test_reconcile_equal_extending_and_divergent() -> None:
    assert reconcile("Hello", "Hello") == ""
    assert reconcile("Hello", "Hello, world") == ", world"
    assert reconcile("", "anything") == "anything"
    assert reconcile("Hello", "Help") is None
    assert reconcile("Hello world", "Hello") is None


def test_one_post_is_spread_over_several_chunks() -> None:
    async def scenario(clock: FakeClock, posts: Posts) -> None:
        await posts.queue.put("abcdefghij")
        await clock.advance_to(1.0)
        await posts.queue.put(None)
        await clock.advance_to(1.0)

    sent = run(scenario)
    assert "".join(piece for _, piece in sent) == "abcdefghij"
    assert [piece for _, piece in sent] == list("abcdefghij")
    assert [t for t, _ in sent] == [round(i * 0.1, 6) for i in range(10)]


def test_an_early_post_flushes_the_rest_of_the_previous_one() -> None:
    async def scenario(clock: FakeClock, posts: Posts) -> None:
        await posts.queue.put("abcdefghij")
        await clock.advance_to(0.45)
        await posts.queue.put("KLMNOP")
        await clock.advance_to(3.0)
        await posts.queue.put(None)
        await clock.advance_to(3.0)

    sent = run(scenario)
    assert "".join(piece for _, piece in sent) == "abcdefghijKLMNOP"
    first = [(t, p) for t, p in sent if t < 0.45]
    assert [p for _, p in first] == list("abcde")
    at_second = [p for t, p in sent if t == 0.45]
    assert at_second[0] == "fghij"  # the rest of the first post, at once
    # The estimate moved from 1.0 toward the observed 0.45 s: 0.725 s, 7 slots for 6 chars.
    second = [(t, p) for t, p in sent if t >= 0.45][1:]
    assert [p for _, p in second] == list("KLMNOP")
    assert second[0][0] == 0.45
    assert second[-1][0] < 0.45 + 0.725


def test_the_last_post_keeps_its_schedule_after_the_source_ends() -> None:
    async def scenario(clock: FakeClock, posts: Posts) -> None:
        await posts.queue.put("abcd")
        await posts.queue.put(None)
        await clock.advance_to(0.3)
        await clock.advance_to(2.0)

    sent = run(scenario)
    assert sent == [(0.0, "a"), (0.25, "b"), (0.5, "c"), (0.75, "d")]


def test_closing_the_paced_stream_closes_its_source() -> None:
    closed: list[bool] = []

    async def endless() -> AsyncIterator[str]:
        try:
            while True:
                yield "x"
                await asyncio.sleep(3600)
        finally:
            closed.append(True)

    async def main() -> Any:
        clock = FakeClock()
        stream = paced(endless(), clock, first_interval=1.0, chunk_seconds=CHUNK)
        first = await anext(stream)
        await stream.aclose()
        return first

    assert asyncio.run(main()) == "x"
    assert closed == [True]


@pytest.mark.parametrize("chunk", [0.05, 0.5])
def test_pieces_never_come_faster_than_the_chunk_spacing(chunk: float) -> None:
    async def main() -> list[float]:
        clock, posts = FakeClock(), Posts()
        times: list[float] = []

        async def consume() -> None:
            async for _piece in paced(
                posts.texts(), clock, first_interval=1.0, chunk_seconds=chunk
            ):
                times.append(clock.now())

        consumer = asyncio.ensure_future(consume())
        await posts.queue.put("x" * 100)
        await clock.advance_to(2.0)
        await posts.queue.put(None)
        await clock.advance_to(2.0)
        await asyncio.wait_for(consumer, 5)
        return times

    times = asyncio.run(main())
    assert len(times) == round(1.0 / chunk)
    assert all(b - a >= chunk - 1e-9 for a, b in itertools.pairwise(times))


def test_pacing_never_delays_the_end_of_a_stream_once_the_whole_reply_is_known() -> None:
    """The source's end (the relay ends when the final reply is known) sends what
    is left of the last post at once: no paced sleep runs after it, so the stream ends even
    on a clock where time never passes."""

    async def main() -> tuple[list[tuple[float, str]], list[asyncio.Future[None]]]:
        clock, posts = FakeClock(), Posts()
        sent: list[tuple[float, str]] = []

        async def consume() -> None:
            async for piece in paced(
                posts.texts(), clock, first_interval=1.0, chunk_seconds=CHUNK, flush_at_end=True
            ):
                sent.append((clock.now(), piece))

        consumer = asyncio.ensure_future(consume())
        await posts.queue.put("abcd")
        await settle()
        await posts.queue.put(None)
        await settle()
        await asyncio.wait_for(consumer, 5)  # time never advanced: a paced sleep would hang
        return sent, [future for *_, future in clock._sleepers if not future.cancelled()]

    sent, still_sleeping = asyncio.run(main())
    assert sent == [(0.0, "a"), (0.0, "bcd")]
    assert still_sleeping == []  # the one wait for a next post was abandoned at the end
