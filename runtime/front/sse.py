"""Streamed replies (``stream: true``) as server-sent events.

The stream is built from *reply events* (``ReplyEvents``): ``Delta`` (content relayed while
the worker generates) and ``Final`` (the finished reply). ``runtime.front.stream_events``
picks the source of each request: a plain one (``generated.streaming.streams_deltas``) gets
``progress_stream.delta_events``, paced deltas while the worker posts then the final reply;
any other (tools, a structured ``response_format``) gets ``whole_reply``, one ``Final`` once
the request is done. ``chunk_stream`` turns them into chunks: a role chunk, a content chunk
per delta, then the rest of the final reply (a reply equal to or extending the relayed text
sends the rest; one that diverges ends the stream with 502 stream_diverged), a tool-call
chunk when there are calls, a finish chunk, a usage chunk (``choices: []``) with
stream_options.include_usage, then ``[DONE]``. Keep-alive comments (``comment``) are
interleaved by the caller. An error after the headers is one event ``{"error": {...}}``
without a choice, then ``[DONE]``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from generated.chat.names import (
    PARAM_STREAM_OPTIONS,
    REPLY_CONTENT,
    REPLY_FINISH_REASON,
    REPLY_REASONING_CONTENT,
    REPLY_TOOL_CALLS,
    REPLY_USAGE,
    ROLE_ASSISTANT,
)
from generated.errors import StreamDiverged
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
    """Content relayed before the reply is final (delta streaming)."""

    text: str
    model: str = ""


@dataclass(frozen=True)
class Final:
    """The finished reply."""

    reply: Reply


ReplyEvents = AsyncIterator[Delta | Final]


async def whole_reply(reply: Callable[[], Awaitable[Reply]]) -> ReplyEvents:
    """The whole-reply source: one Final once the request is done."""
    yield Final(await reply())


def encode(payload: dict[str, Any]) -> bytes:
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

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id,
            "object": OBJECT_CHUNK,
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "delta": delta, REPLY_FINISH_REASON: finish, "logprobs": None}
            ],
        }
        if self.include_usage:
            body[REPLY_USAGE] = None
        return body

    def role(self) -> dict[str, Any]:
        return self.chunk({"role": ROLE_ASSISTANT, REPLY_CONTENT: ""})

    def tool_calls(self, reply: Reply) -> dict[str, Any]:
        calls = [{"index": i, **call} for i, call in enumerate(reply.tool_calls)]
        return self.chunk({REPLY_TOOL_CALLS: calls})

    def finish(self, reply: Reply) -> dict[str, Any]:
        body = self.chunk({}, reply.finish_reason)
        _, estimated = usage(reply, self.request)
        body["x_horde"] = x_horde(reply, estimated)
        return body

    def usage(self, reply: Reply) -> dict[str, Any]:
        counts, estimated = usage(reply, self.request)
        return {
            "id": self.id,
            "object": OBJECT_CHUNK,
            "created": self.created,
            "model": self.model,
            "choices": [],
            REPLY_USAGE: counts,
            "x_horde": x_horde(reply, estimated),
        }


async def chunk_stream(
    events: ReplyEvents, request_id: str, request: dict[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """The chunks of one streamed reply, in the documented order."""
    maker = ChunkMaker(request_id, request)
    relayed = ""
    started = False
    async for event in events:
        if isinstance(event, Delta):
            if not started:
                maker.model = event.model
                started = True
                yield maker.role()
            relayed += event.text
            yield maker.chunk({REPLY_CONTENT: event.text})
            continue
        reply = event.reply
        maker.model = reply.model
        if not started:
            yield maker.role()
        content = reply.content or ""
        if relayed and not content.startswith(relayed):
            raise StreamDiverged()
        delta: dict[str, Any] = {}
        if content[len(relayed) :] or not relayed:
            delta[REPLY_CONTENT] = content[len(relayed) :] if reply.content is not None else None
        if reply.reasoning_content is not None and shows_reasoning(request):
            delta[REPLY_REASONING_CONTENT] = reply.reasoning_content
        if delta:
            yield maker.chunk(delta)
        if reply.tool_calls:
            yield maker.tool_calls(reply)
        yield maker.finish(reply)
        if maker.include_usage:
            yield maker.usage(reply)
        return
