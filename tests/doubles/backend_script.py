"""What a test scripts for the OpenAI-compatible backend double (see ``openai_backend.py``).

Each scripted item answers one request to one route, in order: a :class:`Reply` (a chat
completion, JSON or streamed), a :class:`Failure` (an HTTP error) or a :class:`Hang` (no
answer until the double is closed). This module also builds the response bodies and SSE
chunks in OpenAI's shape.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

TokenCounter = Callable[[str], int]


def count_bytes(text: str) -> int:
    """The double's default tokenizer: one token per UTF-8 byte (simple, deterministic)."""
    return len(text.encode("utf-8"))


def render_chatml(messages: list[dict[str, Any]]) -> str:
    """The double's chat template: ChatML, text parts joined, an image part as ``<image>``."""
    rendered = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(
                part.get("text", "") if part.get("type") == "text" else "<image>"
                for part in content
            )
        rendered.append(f"<|im_start|>{message.get('role')}\n{content or ''}<|im_end|>\n")
    return "".join(rendered) + "<|im_start|>assistant\n"


@dataclass
class Reply:
    """One chat completion.

    ``prompt_tokens`` / ``completion_tokens`` left as None are computed by the double's
    counter; ``chunks`` splits the streamed content (default: word by word);
    ``stream_error_after`` sends an error event after that many content chunks;
    ``think_tags`` puts the reasoning in the content as a leading ``<think>`` block, as
    koboldcpp and llama.cpp templates without a reasoning parser do (streamed word by word
    like the rest of the content, tags in pieces of their own), not in reasoning_content.
    """

    content: str | None = "OK"
    reasoning_content: str | None = None
    tool_calls: list[dict[str, str]] | None = None  # [{"name": ..., "arguments": "{...}"}]
    finish_reason: str | None = None  # default: "tool_calls" with tool calls, else "stop"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    delay: float = 0.0
    chunk_delay: float = 0.0
    chunks: list[str] | None = None
    stream_error_after: int | None = None
    include_usage: bool = True
    think_tags: bool = False


@dataclass
class Failure:
    """An HTTP error: OpenAI's error envelope unless ``body`` is given."""

    status: int = 500
    message: str = "scripted backend failure"
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0

    def payload(self) -> Any:
        if self.body is not None:
            return self.body
        return {"error": {"message": self.message, "type": "server_error", "code": None}}


@dataclass
class Hang:
    """Never answers: the request stays open until the client gives up or the double closes."""


Scripted = Reply | Failure | Hang


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Completion:
    """A Reply bound to the request it answers: builds the JSON body and the SSE chunks."""

    reply: Reply
    model: str
    prompt_tokens: int
    completion_tokens: int
    id: str = field(default_factory=lambda: f"chatcmpl-double-{time.monotonic_ns()}")
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def finish_reason(self) -> str:
        if self.reply.finish_reason is not None:
            return self.reply.finish_reason
        return "tool_calls" if self.reply.tool_calls else "stop"

    def usage(self) -> dict[str, int]:
        total = self.prompt_tokens + self.completion_tokens
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": total,
        }

    def _tool_calls(self) -> list[dict[str, Any]]:
        return [
            {
                "id": f"call_double_{index}",
                "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"]},
            }
            for index, call in enumerate(self.reply.tool_calls or [])
        ]

    def think_block(self) -> str:
        """The reasoning as the leading think block of the content (``think_tags``)."""
        if not self.reply.think_tags or self.reply.reasoning_content is None:
            return ""
        return f"<think>\n{self.reply.reasoning_content}\n</think>\n\n"

    def body(self) -> dict[str, Any]:
        content = self.reply.content
        if self.think_block():
            content = self.think_block() + (content or "")
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if self.reply.reasoning_content is not None and not self.reply.think_tags:
            message["reasoning_content"] = self.reply.reasoning_content
        if self.reply.tool_calls:
            message["tool_calls"] = self._tool_calls()
        body: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
        }
        if self.reply.include_usage:
            body["usage"] = self.usage()
        return body

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    def content_pieces(self) -> list[str]:
        thinking: list[str] = []
        if self.think_block():
            thinking = ["<think>", "\n", *_words(self.reply.reasoning_content or ""), "\n"]
            thinking += ["</think>", "\n\n"]
        if self.reply.chunks is not None:
            return thinking + list(self.reply.chunks)
        return thinking + _words(self.reply.content or "")

    def events(self, include_usage: bool) -> Iterator[dict[str, Any]]:
        """The stream as JSON events, in OpenAI's order; an error event ends it early."""
        yield self._chunk({"role": "assistant", "content": ""})
        if self.reply.reasoning_content and not self.reply.think_tags:
            yield self._chunk({"reasoning_content": self.reply.reasoning_content})
        for sent, piece in enumerate(self.content_pieces()):
            if self.reply.stream_error_after is not None and sent >= self.reply.stream_error_after:
                yield {"error": {"message": "scripted stream failure", "type": "server_error"}}
                return
            yield self._chunk({"content": piece})
        for index, call in enumerate(self._tool_calls()):
            yield self._chunk({"tool_calls": [{"index": index, **call}]})
        yield self._chunk({}, self.finish_reason)
        if include_usage and self.reply.include_usage:
            usage_chunk = self._chunk({})
            usage_chunk["choices"] = []
            usage_chunk["usage"] = self.usage()
            yield usage_chunk


def _words(text: str) -> list[str]:
    """``text`` word by word, each word after the first with its leading space."""
    words = text.split(" ")
    return [word if i == 0 else f" {word}" for i, word in enumerate(words) if word or i]


def sse(event: dict[str, Any] | str) -> bytes:
    data = event if isinstance(event, str) else json.dumps(event)
    return f"data: {data}\n\n".encode()
