"""The front's side of delta streaming: relay, pacing and reconciliation (docs/design.md,
"Streaming").

``relay`` reads a request's retained progress stream from Redis as posts arrive; ``paced``
spreads each post's text evenly until the next, so a client sees a steady flow rather than
a lump a second; ``reconcile`` compares the final reply with what was relayed (extends it:
the rest to send; diverges: None). ``delta_events`` joins them as the ``ReplyEvents`` source
of a plain streamed request. Every name and number comes from ``generated.streaming``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import operator
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from generated import streaming as S
from runtime.front.responses import Reply
from runtime.front.sse import Delta, Final, ReplyEvents

STREAM_START = "0-0"
RELAY_RETRY_FIRST = 0.25
"""Seconds before reading the progress stream again after a Redis error (then doubled)."""
RELAY_RETRY_MAX = 2.0


@dataclass(frozen=True)
class RelayedDelta:
    """One accepted progress post; ``entry_id`` resumes a relay after it."""

    entry_id: str
    generation_id: str
    text: str
    reasoning: str = ""


@dataclass(frozen=True)
class Post:
    """What one post (or a paced piece of it) adds: reasoning, then content.

    Sliced and added as one text of ``len(reasoning) + len(content)`` characters with the
    reasoning first, so pacing cuts it like a string and a piece may hold the end of the
    reasoning and the start of the content.
    """

    reasoning: str = ""
    content: str = ""

    def __len__(self) -> int:
        return len(self.reasoning) + len(self.content)

    def __getitem__(self, span: slice, /) -> Post:
        start, stop, _ = span.indices(len(self))
        split = len(self.reasoning)
        return Post(
            self.reasoning[start : min(stop, split)],
            self.content[max(start - split, 0) : max(stop - split, 0)],
        )

    def __add__(self, other: Post, /) -> Post:
        return Post(self.reasoning + other.reasoning, self.content + other.content)


class Text(Protocol):
    """What pacing cuts: ``str`` or ``Post``."""

    def __len__(self) -> int: ...

    def __getitem__(self, span: slice, /) -> Self: ...

    def __add__(self, other: Self, /) -> Self: ...


T = TypeVar("T", bound=Text)


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def relay(
    redis: Redis,
    request_id: str,
    last_id: str = STREAM_START,
    stop: asyncio.Event | None = None,
) -> AsyncIterator[RelayedDelta]:
    """The deltas of a request's progress stream after ``last_id``, as they arrive.

    Reads with XREAD BLOCK. Returns at the end entry of a generation submitted or
    cancelled, or of a faulted one once something was relayed (a later worker's reply then
    reconciles or diverges); a faulted generation that relayed nothing is skipped, since
    the request may be served again. Once ``stop`` is set it drains without blocking and
    returns. A Redis error never ends a stream: it reads again after a pause
    (``RELAY_RETRY_FIRST`` doubling up to ``RELAY_RETRY_MAX``; at once, then returning, when
    ``stop`` is set: the final reply sends what was not relayed)."""
    key = S.STREAM_KEY.of(request_id)
    cursor = last_id
    relayed = False
    failures = 0
    while True:
        stopping = stop is not None and stop.is_set()
        block = None if stopping else S.RELAY_BLOCK_MILLISECONDS
        try:
            read = await redis.xread({key: cursor}, count=S.RELAY_READ_COUNT, block=block)
        except (RedisError, OSError):
            if stopping:
                return  # the final reply is known: it carries what was not relayed
            await _pause(stop, min(RELAY_RETRY_FIRST * 2**failures, RELAY_RETRY_MAX))
            failures += 1
            continue
        failures = 0
        reply = cast(list[tuple[Any, list[tuple[bytes | str, dict[Any, Any]]]]], read)
        entries = reply[0][1] if reply else []
        for raw_id, raw_fields in entries:
            cursor = _str(raw_id)
            fields = {_str(k): _str(v) for k, v in raw_fields.items()}
            kind = fields.get(S.ENTRY_KIND)
            if kind == S.KIND_DELTA:
                relayed = True
                yield RelayedDelta(
                    cursor,
                    fields[S.ENTRY_GENERATION_ID],
                    fields[S.ENTRY_DELTA],
                    fields.get(S.ENTRY_REASONING, ""),
                )
            elif kind in S.END_KINDS and (kind != S.KIND_FAULTED or relayed):
                return
        if stopping and not entries:
            return


async def _pause(stop: asyncio.Event | None, seconds: float) -> None:
    """``seconds``, or until ``stop`` is set."""
    if stop is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


def reconcile(relayed: str, final: str) -> str | None:
    """What is left to send of ``final`` after ``relayed``; None when they diverge."""
    return final[len(relayed) :] if final.startswith(relayed) else None


# ---------------------------------------------------------------- pacing


def split_evenly(text: T, pieces: int) -> list[T]:
    """``text`` in ``pieces`` consecutive parts whose lengths differ by at most one."""
    pieces = max(1, min(pieces, len(text)))
    size, extra = divmod(len(text), pieces)
    parts: list[T] = []
    start = 0
    for i in range(pieces):
        end = start + size + (1 if i < extra else 0)
        parts.append(text[start:end])
        start = end
    return parts


def plan(text: T, interval: float, chunk_seconds: float) -> list[tuple[float, T]]:
    """(offset after arrival, piece) pairs spreading ``text`` evenly over ``interval``."""
    if not len(text):
        return []
    count = max(1, min(len(text), math.floor(interval / chunk_seconds + 1e-9)))
    step = interval / count
    return [(i * step, piece) for i, piece in enumerate(split_evenly(text, count))]


def next_estimate(
    estimate: float,
    observed: float,
    smoothing: float = S.PACING_SMOOTHING,
    max_interval: float = S.PACING_MAX_INTERVAL_SECONDS,
) -> float:
    """The moving estimate of the interval between posts after observing one."""
    blended = smoothing * observed + (1 - smoothing) * estimate
    return min(max(blended, 0.0), max_interval)


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class LoopClock:
    """The event loop's monotonic clock."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def _arrives_first(task: asyncio.Future[Any], clock: Clock, timeout: float | None) -> bool:
    """Wait for ``task`` or ``timeout`` seconds on ``clock``; True when the task is done."""
    if timeout is None:
        await asyncio.wait({task})
        return True
    sleeper = asyncio.ensure_future(clock.sleep(max(timeout, 0.0)))
    try:
        done, _ = await asyncio.wait({task, sleeper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not sleeper.done():
            sleeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sleeper
    return task in done


def _all_due(pending: deque[tuple[float, T]], now: float) -> deque[tuple[float, T]]:
    """``pending``'s pieces joined into one, due ``now``."""
    if not pending:
        return pending
    return deque([(now, functools.reduce(operator.add, (piece for _, piece in pending)))])


async def paced(
    texts: AsyncIterator[T],
    clock: Clock | None = None,
    *,
    first_interval: float = S.POST_INTERVAL_SECONDS,
    chunk_seconds: float = S.PACING_CHUNK_SECONDS,
    flush_at_end: bool = False,
) -> AsyncIterator[T]:
    """``texts`` (one per post) re-cut into evenly timed pieces; with ``flush_at_end`` the
    end of ``texts`` sends the pieces still pending as one, without waiting.

    Each post is spread over the estimated interval until the next (a moving estimate,
    first ``POST_INTERVAL_SECONDS``, at most ``PACING_MAX_INTERVAL_SECONDS``, pieces at most
    every ``PACING_CHUNK_SECONDS``); a post arriving early flushes what is left of the
    previous one first. ``plan`` and ``next_estimate`` are the pure parts. A ``Post`` is cut
    as one text, its reasoning then its content."""
    clock = clock or LoopClock()
    source = texts.__aiter__()
    pending: deque[tuple[float, T]] = deque()
    estimate = first_interval
    last_arrival: float | None = None
    next_post: asyncio.Future[T] | None = None
    exhausted = False
    try:
        while not (exhausted and not pending):
            while pending and pending[0][0] <= clock.now():
                yield pending.popleft()[1]
            if exhausted:
                if pending:
                    await clock.sleep(pending[0][0] - clock.now())
                continue
            if next_post is None:
                next_post = asyncio.ensure_future(anext(source))
            timeout = pending[0][0] - clock.now() if pending else None
            if not await _arrives_first(next_post, clock, timeout):
                continue
            arrived, next_post = next_post, None
            try:
                text = arrived.result()
            except StopAsyncIteration:
                exhausted = True
                pending = _all_due(pending, clock.now()) if flush_at_end else pending
                continue
            now = clock.now()
            if pending:
                yield functools.reduce(operator.add, (piece for _, piece in pending))
                pending.clear()
            if last_arrival is not None:
                estimate = next_estimate(estimate, now - last_arrival)
            last_arrival = now
            pending.extend(
                (now + offset, piece) for offset, piece in plan(text, estimate, chunk_seconds)
            )
    finally:
        if next_post is not None and not next_post.done():
            next_post.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await next_post
        closer = getattr(source, "aclose", None)
        if closer is not None:
            await closer()


async def paced_posts(
    redis: Redis,
    request_id: str,
    stop: asyncio.Event | None = None,
    clock: Clock | None = None,
    *,
    with_reasoning: bool = True,
) -> AsyncIterator[Post]:
    """The request's relayed posts, paced: what the front sends as reasoning and content
    chunks (the reasoning left out before pacing unless ``with_reasoning``)."""

    async def posts() -> AsyncIterator[Post]:
        async for delta in relay(redis, request_id, stop=stop):
            post = Post(delta.reasoning if with_reasoning else "", delta.text)
            if len(post):
                yield post

    # the relay ends once the whole reply is known: nothing is left to spread it over
    async for piece in paced(posts(), clock, flush_at_end=True):
        yield piece


async def paced_relay(
    redis: Redis,
    request_id: str,
    stop: asyncio.Event | None = None,
    clock: Clock | None = None,
) -> AsyncIterator[str]:
    """The request's relayed content, paced (its reasoning left out)."""
    async for piece in paced_posts(redis, request_id, stop, clock, with_reasoning=False):
        yield piece.content


async def delta_events(
    redis: Redis,
    request_id: str,
    reply: Callable[[], Awaitable[Reply]],
    clock: Clock | None = None,
    *,
    with_reasoning: bool = True,
) -> ReplyEvents:
    """Paced deltas of a plain streamed request, then its final reply.

    ``Delta``s (content and reasoning; reasoning left out before pacing without
    ``with_reasoning``) while the worker posts, then ``Final`` once ``reply()`` returns; its
    arrival stops the relay, which drains first. Pacing never delays the end: once the whole
    reply is known, what is left of the last post goes out at once. ``chunk_stream``
    reconciles the two."""
    stop = asyncio.Event()
    final = asyncio.ensure_future(reply())
    final.add_done_callback(lambda _: stop.set())
    try:
        pieces = paced_posts(redis, request_id, stop, clock, with_reasoning=with_reasoning)
        async for piece in pieces:
            yield Delta(piece.content, reasoning=piece.reasoning)
        yield Final(await final)
    finally:
        if not final.done():
            final.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await final
