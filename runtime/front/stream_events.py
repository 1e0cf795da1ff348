"""What a streamed request sends, before and between its chunks.

``reply_events`` picks the request's ``ReplyEvents`` source: a plain streamed request
(``DELTA_RULE``) relays the worker's progress (``progress_stream.delta_events``), its deltas
named with the model known so far (``stream_model``); any other streams the whole reply.
``keep_alive`` sends an SSE comment with the queue position (``queue_note``) whenever
nothing was sent for a while, so a waiting client or proxy keeps its connection and learns why.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

from redis.asyncio import Redis

from generated.chat.names import PARAM_MODEL, PARAM_MODELS
from generated.streaming import DELTA_RULE
from generated.wire.native import ChatStatus
from runtime.front.progress_stream import delta_events
from runtime.front.responses import shows_reasoning
from runtime.front.sse import Delta, ReplyEvents, comment, whole_reply
from runtime.front.waiter import ReplyWait


def stream_model(status: ChatStatus | None, request: dict[str, Any]) -> str:
    """The model to name in chunks before the reply: the first generation's in the last
    status read, else the request's model (a one-entry models list counts)."""
    for generation in (status.get("generations") if status else None) or []:
        malformed = not isinstance(generation, dict)  # the native JSON is not trusted
        if not malformed and generation.get("model"):
            return str(generation["model"])
    if request.get(PARAM_MODEL):
        return str(request[PARAM_MODEL])
    models = request.get(PARAM_MODELS) or []
    return str(models[0]) if len(models) == 1 else ""


async def _named(events: ReplyEvents, model_of: Callable[[], str]) -> ReplyEvents:
    try:
        async for event in events:
            if isinstance(event, Delta) and not event.model:
                event = dataclasses.replace(event, model=model_of())
            yield event
    finally:
        await events.aclose()


def reply_events(
    redis: Redis, wait: ReplyWait, request_id: str, request: dict[str, Any]
) -> ReplyEvents:
    """The events of one streamed request: relayed deltas then the reply, or the reply."""
    if not DELTA_RULE.streams_deltas(request):
        return whole_reply(wait.reply)
    relayed = delta_events(redis, request_id, wait.reply, with_reasoning=shows_reasoning(request))
    return _named(relayed, lambda: stream_model(wait.status, request))


def queue_note(status: ChatStatus | None) -> str:
    """The keep-alive comment's text for the last status read."""
    if status is None:
        return "waiting for the Horde"
    if status.get("processing"):
        return "a worker is generating the reply"
    if status.get("is_possible") is False or status.get("eligible_threads") == 0:
        return "queued: no eligible worker is online yet"
    position = int(status.get("queue_position") or 0)
    wait_time = int(status.get("wait_time") or 0)
    return f"queued: position {position}, estimated wait {wait_time} s"


async def keep_alive(
    items: AsyncIterator[bytes], interval: float, note: Callable[[], str]
) -> AsyncIterator[bytes]:
    """``items`` as they come, with a comment line after every ``interval`` s of silence."""
    source = items.__aiter__()
    pending: asyncio.Future[bytes] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(source))
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield comment(note())
                continue
            arrived, pending = pending, None
            try:
                item = arrived.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        closer = getattr(source, "aclose", None)
        if closer is not None:
            await closer()
