"""The conversation as the native API reads it: the flattened prompt and context_fit.

``flatten_messages`` gives the prompt column: the whole conversation as one string, which
the token estimate, kudos and moderation read, never sent to a worker and never holding
image bytes. ``truncate_oldest`` applies context_fit truncate_oldest: it drops the oldest
whole turns (a user message with its replies, calls and answers), keeps system and developer
messages and the latest user turn, and sizes text as the context estimate does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from generated.chat.names import (
    CONTEXT_FIT_REFUSE,
    CONTEXT_FIT_TRUNCATE_OLDEST,
    LIMIT_MAX_CONTEXT_LENGTH,
)
from generated.chat.tables_reply import CONTEXT_FIT_KEPT_ROLES, CONTEXT_FIT_TURN_ROLE, FLATTEN
from generated.errors import NoWorkerSupportsLimit
from runtime.contract.messages import estimated_tokens, text_chars
from runtime.contract.registry import implements


def _image(part: dict[str, Any]) -> str:
    url: str = part["image_url"]["url"]
    if url.startswith("data:"):
        return FLATTEN["image_inline"]
    return FLATTEN["image_url"].format(url=url)


def _text(part: dict[str, Any]) -> str:
    text: str = part["text"]
    return text


def _refusal(part: dict[str, Any]) -> str:
    return FLATTEN["refusal"].format(refusal=part["refusal"])


# One renderer per content part type; codegen refuses a spec whose messages.yaml defines a
# part type missing here (registry.py).
PARTS: dict[str, Callable[[dict[str, Any]], str]] = {
    "text": _text,
    "image_url": _image,
    "refusal": _refusal,
}
implements("flattened_parts", PARTS)


def tool_call_text(call: dict[str, Any]) -> str:
    """One tool call as the flattened conversation and the generation text show it."""
    fn = call["function"]
    return FLATTEN["tool_call"].format(id=call["id"], name=fn["name"], arguments=fn["arguments"])


def _label(message: dict[str, Any]) -> str:
    role: str = message["role"]
    if message.get("tool_call_id"):
        return FLATTEN["label_tool"].format(role=role, tool_call_id=message["tool_call_id"])
    if message.get("name"):
        return FLATTEN["label_with_name"].format(role=role, name=message["name"])
    return role


def _body(message: dict[str, Any]) -> str:
    content = message.get("content")
    pieces: list[str] = []
    if isinstance(content, str):
        pieces.append(content)
    elif isinstance(content, list):
        pieces.extend(PARTS[part["type"]](part) for part in content)
    if message.get("refusal"):
        pieces.append(FLATTEN["refusal"].format(refusal=message["refusal"]))
    pieces.extend(tool_call_text(call) for call in message.get("tool_calls") or [])
    return FLATTEN["part_separator"].join(pieces)


def flatten_messages(messages: list[dict[str, Any]]) -> str:
    """The prompt column: every message as one labelled line, in order."""
    return FLATTEN["message_separator"].join(
        FLATTEN["line"].format(label=_label(m), body=_body(m)) for m in messages
    )


def _turns(messages: list[dict[str, Any]]) -> list[list[int]]:
    """Indices of the droppable messages, grouped into turns (oldest first)."""
    turns: list[list[int]] = []
    for i, message in enumerate(messages):
        if message["role"] in CONTEXT_FIT_KEPT_ROLES:
            continue
        if message["role"] == CONTEXT_FIT_TURN_ROLE or not turns:
            turns.append([])
        turns[-1].append(i)
    return turns


def truncate_oldest(
    messages: list[dict[str, Any]], max_context_tokens: int, *, reserved_tokens: int = 0
) -> list[dict[str, Any]]:
    """The messages with the oldest whole turns dropped until they fit, or the limit gap.

    The conversation fits when its estimated tokens plus ``reserved_tokens`` (the requested
    output, or the reply reserve when max_tokens is absent, and the tool definitions, which
    are never dropped) are at most ``max_context_tokens``, so what is kept leaves room for a
    reply. A conversation that already fits comes back unchanged (a copy).
    Raises NoWorkerSupportsLimit on max_context_length when the system and developer
    messages and the latest user turn alone do not fit.
    """
    sizes = [text_chars([m]) for m in messages]
    total = sum(sizes)
    budget = max_context_tokens - reserved_tokens
    dropped: set[int] = set()
    for turn in _turns(messages)[:-1]:
        if estimated_tokens(total) <= budget:
            break
        dropped.update(turn)
        total -= sum(sizes[i] for i in turn)
    if estimated_tokens(total) > budget:
        raise NoWorkerSupportsLimit(
            limit=LIMIT_MAX_CONTEXT_LENGTH,
            value=estimated_tokens(total) + reserved_tokens,
            maximum=max_context_tokens,
            param=LIMIT_MAX_CONTEXT_LENGTH,
        )
    return [m for i, m in enumerate(messages) if i not in dropped]


class Fit(Protocol):
    """A context_fit rule: the messages cut to fit, or the limit gap."""

    def __call__(
        self, messages: list[dict[str, Any]], max_context_tokens: int, *, reserved_tokens: int = 0
    ) -> list[dict[str, Any]]: ...


# The horde key context_fit -> the rule applied to a conversation too long for every served
# context; None: the conversation is kept whole and the pool gap refuses it. Codegen refuses
# a mode missing here (registry.py).
CONTEXT_FIT: dict[str, Fit | None] = {
    CONTEXT_FIT_REFUSE: None,
    CONTEXT_FIT_TRUNCATE_OLDEST: truncate_oldest,
}
implements("context_fit_modes", CONTEXT_FIT)
