"""A backend's chat completion -> the structured reply the worker submits.

Reasoning goes into ``reasoning_content`` however the backend reports it: a
``reasoning_content`` field (llama.cpp, older vLLM), a ``reasoning`` field (Ollama, newer
vLLM) or a leading ``<think>`` block (koboldcpp, raw templates; cut off by max_tokens it
stays reasoning). One splitter (:class:`ThinkSplitter`) serves the whole content and a
stream alike, so the submitted reply always extends what was relayed. Tool calls are
normalised to OpenAI's shape; a reply without a finish_reason is invalid.
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


@dataclass(frozen=True)
class Parts:
    """Text added to the answer (content) and to the reasoning by one piece of content."""

    content: str = ""
    reasoning: str = ""


class ThinkSplitter:
    """Splits content that may open with a ``<think>`` block, piece by piece.

    It holds back only what the next piece may still change: leading whitespace and a
    partial ``<think>`` before the content's kind is known, and in the reasoning its
    trailing whitespace and a partial ``</think>`` (the reasoning is stripped, the answer
    left-stripped, as ``split_reasoning`` always did). ``finish`` gives out what is held.
    """

    UNDECIDED, PLAIN, THINKING, ANSWER = "undecided", "plain", "thinking", "answer"

    def __init__(self) -> None:
        self.state = self.UNDECIDED
        self.held = ""
        self.started = False  # the reasoning (THINKING) or the answer (ANSWER) has begun

    def feed(self, text: str) -> Parts:
        if not text:
            return Parts()
        if self.state == self.UNDECIDED:
            self.held += text
            opening = self.held.lstrip()
            if not opening or (len(opening) < len(THINK_OPEN) and THINK_OPEN.startswith(opening)):
                return Parts()
            if not opening.startswith(THINK_OPEN):
                return self.plain()
            self.state, self.held = self.THINKING, ""
            return self._thinking(opening[len(THINK_OPEN) :])
        if self.state == self.THINKING:
            return self._thinking(text)
        if self.state == self.ANSWER:
            return self._answer(text)
        return Parts(content=text)

    def plain(self) -> Parts:
        """No think block (or one reported apart): the held text and all later is content."""
        if self.state != self.UNDECIDED:
            return Parts()
        held, self.held, self.state = self.held, "", self.PLAIN
        return Parts(content=held)

    def _thinking(self, text: str) -> Parts:
        pending = self.held + text
        if not self.started:
            pending = pending.lstrip()
        before, closed, after = pending.partition(THINK_CLOSE)
        if closed:
            self.held, self.state = "", self.ANSWER
            reasoning = before.rstrip()
            self.started = False
            answer = self._answer(after)
            return Parts(content=answer.content, reasoning=reasoning)
        keep = next(
            (
                n
                for n in range(min(len(THINK_CLOSE) - 1, len(pending)), 0, -1)
                if THINK_CLOSE.startswith(pending[-n:])
            ),
            0,
        )
        cut = len(pending) - keep
        while cut > 0 and pending[cut - 1].isspace():
            cut -= 1
        self.held = pending[cut:]
        if cut:
            self.started = True
        return Parts(reasoning=pending[:cut])

    def _answer(self, text: str) -> Parts:
        if not self.started:
            text = text.lstrip()
            self.started = bool(text)
        return Parts(content=text)

    def finish(self) -> Parts:
        """What is still held once the content is complete."""
        if self.state == self.UNDECIDED:
            return self.plain()
        if self.state == self.THINKING:
            held, self.held = self.held, ""
            return Parts(reasoning=held.rstrip() if self.started else held.strip())
        return Parts()


def split_reasoning(content: str | None) -> tuple[str | None, str | None]:
    """(content, reasoning) from a content that may open with a think block."""
    if content is None:
        return None, None
    splitter = ThinkSplitter()
    first, rest = splitter.feed(content), splitter.finish()
    if splitter.state == ThinkSplitter.PLAIN:
        return content, None
    answer, reasoning = first.content + rest.content, first.reasoning + rest.reasoning
    return answer or None, reasoning or None


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


def parse_chat_completion(body: dict[str, Any], *, split_think: bool = True) -> ChatReply:
    """The structured reply of a completion body; ``split_think=False`` for a body whose
    content was already split (``StreamAccumulator.completion``)."""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise BackendInvalidReply(detail="the completion has no choice")
    choice = choices[0]
    message = choice.get("message") or {}
    content = message.get(REPLY_CONTENT)
    if content is not None and not isinstance(content, str):
        raise BackendInvalidReply(detail="the content is not a string")
    reasoning = message.get(REPLY_REASONING_CONTENT) or message.get("reasoning")
    if reasoning is None and split_think:
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
    """Folds streamed chunks into one completion body for :func:`parse_chat_completion`.

    Content deltas go through a :class:`ThinkSplitter` (unless the backend reports reasoning
    in a field of its own), so what ``add_parts`` gives out, joined, is exactly the content
    and reasoning of ``completion()``: the progress the worker posts and the reply it
    submits are split the same way.
    """

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.splitter = ThinkSplitter()
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None

    def add(self, chunk: dict[str, Any]) -> str:
        """Fold one chunk in; returns the content text it added."""
        return self.add_parts(chunk).content

    def add_parts(self, chunk: dict[str, Any]) -> Parts:
        """Fold one chunk in; returns the content and the reasoning it added."""
        if isinstance(chunk.get(REPLY_USAGE), dict):
            self.usage = chunk[REPLY_USAGE]
        choices = chunk.get("choices") or []
        if not choices:
            return Parts()
        choice = choices[0]
        delta = choice.get("delta") or {}
        field_reasoning = delta.get(REPLY_REASONING_CONTENT) or delta.get("reasoning") or ""
        held = self.splitter.plain() if field_reasoning else Parts()
        split = self.splitter.feed(delta.get(REPLY_CONTENT) or "")
        added = Parts(held.content + split.content, field_reasoning + split.reasoning)
        self.content.append(added.content)
        self.reasoning.append(added.reasoning)
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
        return added

    def completion(self) -> dict[str, Any]:
        """The folded completion, its content and reasoning already split."""
        if self.finish_reason is None:
            raise BackendInvalidReply(detail="the stream ended without a finish_reason")
        rest = self.splitter.finish()
        self.content.append(rest.content)
        self.reasoning.append(rest.reasoning)
        message: dict[str, Any] = {REPLY_CONTENT: "".join(self.content) or None}
        if any(self.reasoning):
            message[REPLY_REASONING_CONTENT] = "".join(self.reasoning)
        if self.calls:
            message[REPLY_TOOL_CALLS] = [self.calls[i] for i in sorted(self.calls)]
        choice = {"message": message, REPLY_FINISH_REASON: self.finish_reason}
        return {"choices": [choice], REPLY_USAGE: self.usage}
