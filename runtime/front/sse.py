"""Streamed replies (``stream: true``) as server-sent events.

A stream is built from *reply events* (``ReplyEvents``): ``Delta`` (content relayed while
the worker generates) and ``Final`` (the finished reply). ``stream_events`` picks the source:
``progress_stream.delta_events`` for a plain request, ``whole_reply`` for any other (tools,
a structured ``response_format``). ``chunk_stream`` turns them into chunks in OpenAI's order
(docs/design.md, "Streaming"); keep-alive comments are interleaved by the caller.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from generated.chat.names import (
    PARAM_STREAM_OPTIONS,
)
from generated.errors import StreamDiverged
from generated.wire.front import ChatCompletionChunk, ChunkDelta, ChunkToolCall
from runtime.front.responses import (
    OBJECT_CHUNK,
    Reply,
    completion_id,
    shows_reasoning,
    usage,
    x_horde,
)

DONE = b"data: [DONE]\n\n"
INCLUDE_USAGE = "include_usage"
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


@dataclass(frozen=True)
class Delta:
    """Content (``text``) and reasoning relayed before the reply is final (delta streaming)."""

    text: str
    model: str = ""
    reasoning: str = ""


@dataclass(frozen=True)
class Final:
    """The finished reply."""

    reply: Reply


ReplyEvents = AsyncGenerator[Delta | Final, None]


async def whole_reply(reply: Callable[[], Awaitable[Reply]]) -> ReplyEvents:
    """The whole-reply source: one Final once the request is done."""
    yield Final(await reply())


def encode(payload: Mapping[str, object]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def comment(text: str) -> bytes:
    """A keep-alive comment line (ignored by SSE clients)."""
    return b": " + text.replace("\n", " ").encode() + b"\n\n"


class ChunkMaker:
    """chat.completion.chunk objects of one request (id, created, model, usage policy)."""

    def __init__(self, request_id: str, request: dict[str, Any]) -> None:
        self.id = completion_id(request_id)
        self.created = int(time.time())
        self.model = ""
        self.request = request
        options = request.get(PARAM_STREAM_OPTIONS) or {}
        self.include_usage = bool(options.get(INCLUDE_USAGE))

    def chunk(self, delta: ChunkDelta, finish: str | None = None) -> ChatCompletionChunk:
        body: ChatCompletionChunk = {
            "id": self.id,
            "object": OBJECT_CHUNK,
            "created": self.created,
            "model": self.model,
            "choices": [
                # finish: Reply.finish_reason, one of spec/chat/reply.yaml's finish_reasons
                # (FINISH_*), which codegen holds equal to this enum.
                {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}  # type: ignore[typeddict-item]
            ],
        }
        if self.include_usage:
            body["usage"] = None
        return body

    def role(self) -> ChatCompletionChunk:
        return self.chunk({"role": "assistant", "content": ""})

    def tool_calls(self, reply: Reply) -> ChatCompletionChunk:
        calls = [{"index": i, **call} for i, call in enumerate(reply.tool_calls)]
        return self.chunk({"tool_calls": cast(list[ChunkToolCall], calls)})

    def finish(self, reply: Reply) -> ChatCompletionChunk:
        body = self.chunk({}, reply.finish_reason)
        _, estimated = usage(reply, self.request)
        body["x_horde"] = x_horde(reply, estimated)
        return body

    def usage(self, reply: Reply) -> ChatCompletionChunk:
        counts, estimated = usage(reply, self.request)
        return {
            "id": self.id,
            "object": OBJECT_CHUNK,
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": counts,
            "x_horde": x_horde(reply, estimated),
        }


def rest_of(reply: Reply, relayed: str, relayed_reasoning: str | None) -> ChunkDelta:
    """The final reply's delta after what was relayed, channel by channel (reasoning only
    when ``relayed_reasoning`` is not None); a channel that does not extend what was
    relayed diverges (502 stream_diverged)."""
    content = reply.content or ""
    if relayed and not content.startswith(relayed):
        raise StreamDiverged()
    delta: ChunkDelta = {}
    if content[len(relayed) :] or not relayed:
        delta["content"] = content[len(relayed) :] if reply.content is not None else None
    if relayed_reasoning is None or reply.reasoning_content is None:
        if relayed_reasoning:  # reasoning was relayed and the reply has none
            raise StreamDiverged()
        return delta
    reasoning = reply.reasoning_content
    if not reasoning.startswith(relayed_reasoning):
        raise StreamDiverged()
    if reasoning[len(relayed_reasoning) :] or not relayed_reasoning:
        delta["reasoning_content"] = reasoning[len(relayed_reasoning) :]
    return delta


async def chunk_stream(
    events: ReplyEvents, request_id: str, request: dict[str, Any]
) -> AsyncIterator[ChatCompletionChunk]:
    """The chunks of one streamed reply, in the documented order.

    A role chunk; per delta a ``reasoning_content`` chunk (unless horde.include_reasoning
    is false) and a ``content`` chunk; the rest of the final reply channel by channel (one
    that diverges from what was relayed ends the stream with 502 stream_diverged); a
    tool-call chunk when there are calls; a finish chunk; a usage chunk (``choices: []``)
    with stream_options.include_usage; ``[DONE]``. An error after the headers is one event
    ``{"error": {...}}`` without a choice, then ``[DONE]``."""
    maker = ChunkMaker(request_id, request)
    with_reasoning = shows_reasoning(request)
    relayed = ""
    relayed_reasoning = ""
    started = False
    async for event in events:
        if isinstance(event, Delta):
            if not started:
                maker.model = event.model
                started = True
                yield maker.role()
            if event.reasoning and with_reasoning:
                relayed_reasoning += event.reasoning
                yield maker.chunk({"reasoning_content": event.reasoning})
            if event.text:
                relayed += event.text
                yield maker.chunk({"content": event.text})
            continue
        reply = event.reply
        maker.model = reply.model
        if not started:
            yield maker.role()
        delta = rest_of(reply, relayed, relayed_reasoning if with_reasoning else None)
        if delta:
            yield maker.chunk(delta)
        if reply.tool_calls:
            yield maker.tool_calls(reply)
        yield maker.finish(reply)
        if maker.include_usage:
            yield maker.usage(reply)
        return
