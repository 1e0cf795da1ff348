"""A backend's chat completion -> the structured reply the worker submits.

Reasoning is separated into ``reasoning_content`` whichever way the backend reports it: a
``reasoning_content`` field (llama.cpp, older vLLM), a ``reasoning`` field (Ollama, newer
vLLM) or a leading ``<think>...</think>`` block in the content (koboldcpp, raw templates).
A think block cut off by max_tokens stays reasoning: it never becomes the answer.
Tool calls are normalised to OpenAI's shape; a reply without a finish_reason is invalid.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from generated.chat.names import (
    FINISH_REASONS,
    FINISH_STOP,
    FINISH_TOOL_CALLS,
    REPLY_CONTENT,
    REPLY_FINISH_REASON,
    REPLY_REASONING_CONTENT,
    REPLY_TOOL_CALLS,
    REPLY_USAGE,
)
from generated.errors import BackendInvalidReply

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
# What some backends report instead of OpenAI's finish reasons (FINISH_REASONS).
FINISH_ALIASES = {"function_call": FINISH_TOOL_CALLS, "eos": FINISH_STOP, "eos_token": FINISH_STOP}


@dataclass
class ChatReply:
    content: str | None
    reasoning_content: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    usage: dict[str, int | None] = field(default_factory=dict)


def split_reasoning(content: str | None) -> tuple[str | None, str | None]:
    """(content, reasoning) from a content that may open with a think block."""
    if content is None or not content.lstrip().startswith(THINK_OPEN):
        return content, None
    body = content.lstrip()[len(THINK_OPEN) :]
    reasoning, closed, answer = body.partition(THINK_CLOSE)
    if not closed:  # cut off while thinking: there is no answer
        return None, reasoning.strip() or None
    return answer.lstrip() or None, reasoning.strip() or None


def _tool_call(raw: Any) -> dict[str, Any]:
    function = raw.get("function") if isinstance(raw, dict) else None
    if not isinstance(function, dict) or not function.get("name"):
        raise BackendInvalidReply(detail="a tool call without a function name")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {})
    call_id = raw.get("id") or f"call_{uuid.uuid4().hex[:24]}"
    return {
        "id": str(call_id),
        "type": "function",
        "function": {"name": str(function["name"]), "arguments": arguments.strip()},
    }


def _usage(raw: Any) -> dict[str, int | None]:
    usage = raw if isinstance(raw, dict) else {}
    details = usage.get("completion_tokens_details") or {}

    def count(value: Any) -> int | None:
        return value if isinstance(value, int) and value >= 0 else None

    return {
        "prompt_tokens": count(usage.get("prompt_tokens")),
        "completion_tokens": count(usage.get("completion_tokens")),
        "reasoning_tokens": count(details.get("reasoning_tokens")),
    }


def parse_chat_completion(body: dict[str, Any]) -> ChatReply:
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise BackendInvalidReply(detail="the completion has no choice")
    choice = choices[0]
    message = choice.get("message") or {}
    content = message.get(REPLY_CONTENT)
    if content is not None and not isinstance(content, str):
        raise BackendInvalidReply(detail="the content is not a string")
    reasoning = message.get(REPLY_REASONING_CONTENT) or message.get("reasoning")
    if reasoning is None:
        content, reasoning = split_reasoning(content)
    raw_calls = message.get(REPLY_TOOL_CALLS) or []
    if not raw_calls and isinstance(message.get("function_call"), dict):
        raw_calls = [{"function": message["function_call"]}]
    tool_calls = [_tool_call(raw) for raw in raw_calls]
    finish = choice.get(REPLY_FINISH_REASON)
    if isinstance(finish, str):
        finish = FINISH_ALIASES.get(finish, finish)
    if finish not in FINISH_REASONS:
        raise BackendInvalidReply(detail=f"finish_reason {finish!r}")
    if tool_calls and finish == FINISH_STOP:
        finish = FINISH_TOOL_CALLS
    if tool_calls and content == "":
        content = None
    return ChatReply(content, reasoning or None, tool_calls, finish, _usage(body.get(REPLY_USAGE)))


class StreamAccumulator:
    """Folds streamed chunks into one completion body for :func:`parse_chat_completion`."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None

    def add(self, chunk: dict[str, Any]) -> str:
        """Fold one chunk in; returns the content text it added."""
        if isinstance(chunk.get(REPLY_USAGE), dict):
            self.usage = chunk[REPLY_USAGE]
        choices = chunk.get("choices") or []
        if not choices:
            return ""
        choice = choices[0]
        delta = choice.get("delta") or {}
        text = delta.get(REPLY_CONTENT) or ""
        self.content.append(text)
        self.reasoning.append(delta.get(REPLY_REASONING_CONTENT) or delta.get("reasoning") or "")
        for part in delta.get(REPLY_TOOL_CALLS) or []:
            call = self.calls.setdefault(
                int(part.get("index", 0)), {"function": {"name": "", "arguments": ""}}
            )
            if part.get("id"):
                call["id"] = part["id"]
            function = part.get("function") or {}
            call["function"]["name"] += function.get("name") or ""
            call["function"]["arguments"] += function.get("arguments") or ""
        if choice.get(REPLY_FINISH_REASON):
            self.finish_reason = choice[REPLY_FINISH_REASON]
        return text

    def completion(self) -> dict[str, Any]:
        if self.finish_reason is None:
            raise BackendInvalidReply(detail="the stream ended without a finish_reason")
        message: dict[str, Any] = {REPLY_CONTENT: "".join(self.content) or None}
        if any(self.reasoning):
            message[REPLY_REASONING_CONTENT] = "".join(self.reasoning)
        if self.calls:
            message[REPLY_TOOL_CALLS] = [self.calls[i] for i in sorted(self.calls)]
        choice = {"message": message, REPLY_FINISH_REASON: self.finish_reason}
        return {"choices": [choice], REPLY_USAGE: self.usage}
