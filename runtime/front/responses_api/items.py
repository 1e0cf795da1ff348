"""A Responses request's input items as chat messages (spec/responses/input.yaml).

``input_messages`` turns the items, in order, into chat messages the chat contract checks
whole: a message item a message of its role, a function_call a tool call of the assistant
message before it (or a new one), a function_call_output a tool message, a reasoning item
nothing. An unknown type is refused, an unknown key dropped; ``origins`` records each
message's item (``Origin``) so a chat refusal can name it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from generated.chat.names import ROLE_ASSISTANT, ROLE_TOOL, ROLE_USER
from generated.errors import UnsupportedChatParameter
from generated.responses.names import ITEM_MESSAGE
from generated.responses.tables import ITEMS, PARTS, REFUSED_ITEMS, REFUSED_PARTS
from runtime.contract.checks import check, join_param, kind_of
from runtime.contract.registry import implements

CONTENT = "content"
"""The chat message's content key (a function_call_output item's is ``output``)."""
MESSAGE_KEYS = {"role": "role", CONTENT: CONTENT}
OUTPUT_KEYS = {CONTENT: "output", "tool_call_id": "call_id"}
CALL_KEYS = {"id": "call_id", "function.name": "name", "function.arguments": "arguments"}


@dataclass
class Origin:
    """Where a chat message came from: the item's path, the item key each key of the chat
    message came from (a key without one is named by the item itself), and the path of each
    of its tool calls (function call items, named with ``CALL_KEYS``)."""

    path: str
    keys: dict[str, str] = field(default_factory=lambda: dict(MESSAGE_KEYS))
    calls: list[str] = field(default_factory=list)

    def name(self, tail: str) -> str:
        """The Responses path of ``messages.[i].<tail>`` for this message."""
        calls = re.match(r"tool_calls\.\[(\d+)\]\.?(.*)$", tail)
        if calls is not None and int(calls.group(1)) < len(self.calls):
            call, key = self.calls[int(calls.group(1))], CALL_KEYS.get(calls.group(2))
            return join_param(call, key) if key else call
        head, dot, rest = tail.partition(".")
        if head == "role" and self.calls:  # a tool history's refusal: its first call
            return self.calls[0]
        if head not in self.keys:
            return self.path
        return join_param(self.path, self.keys[head] + dot + rest)


def shaped(value: dict[str, Any], shape: dict[str, Any], where: str) -> dict[str, Any]:
    """The keys of ``shape`` (spec/responses/input.yaml: required keys, each key's schema)
    that ``value`` holds, each checked; its other keys dropped."""
    check(
        value,
        {"type": "object", "required": shape["required"], "properties": shape["keys"]},
        where,
    )
    return {key: value[key] for key in shape["keys"] if key in value}


def _text(part: dict[str, Any], becomes: str) -> dict[str, Any]:
    return {"type": becomes, "text": part["text"]}


def _refusal(part: dict[str, Any], becomes: str) -> dict[str, Any]:
    return {"type": becomes, "refusal": part["refusal"]}


def _image(part: dict[str, Any], becomes: str) -> dict[str, Any]:
    image = {"url": part["image_url"], **({"detail": part["detail"]} if "detail" in part else {})}
    return {"type": becomes, "image_url": image}


# What a content part becomes (spec/responses/input.yaml content_parts.*.becomes) -> the
# chat content part made of its keys.
PARTS_RULES: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {
    "text": _text,
    "refusal": _refusal,
    "image_url": _image,
}
implements("responses_parts", PARTS_RULES)


def _part(part: Any, where: str) -> dict[str, Any]:
    kind = kind_of(part, where, PARTS, REFUSED_PARTS)
    spec = PARTS[kind]
    for key, reason in spec["refused_keys"].items():
        if part.get(key) is not None:
            at = join_param(where, key)
            raise UnsupportedChatParameter(key=at, reason=reason, param=at)
    return PARTS_RULES[spec["becomes"]](shaped(part, spec, where), spec["becomes"])


def _content(value: Any, where: str) -> Any:
    """A string as it is, content parts as the chat parts they become."""
    if isinstance(value, str):
        return value
    return [_part(part, join_param(where, i)) for i, part in enumerate(value)]


class _Messages:
    """The chat messages made so far, with their origins."""

    def __init__(self, origins: list[Origin]) -> None:
        self.messages: list[dict[str, Any]] = []
        self.origins = origins

    def add(self, message: dict[str, Any], origin: Origin) -> None:
        self.messages.append(message)
        self.origins.append(origin)


def _message(item: dict[str, Any], where: str, out: _Messages) -> None:
    content = _content(item[CONTENT], join_param(where, CONTENT))
    out.add({"role": item["role"], CONTENT: content}, Origin(where))


def _function_call(item: dict[str, Any], where: str, out: _Messages) -> None:
    call = {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": item["name"], "arguments": item["arguments"]},
    }
    last = out.messages[-1] if out.messages else None
    if last is None or last["role"] != ROLE_ASSISTANT:  # the calls of a turn without text
        out.add({"role": ROLE_ASSISTANT}, Origin(where, keys={}))
        last = out.messages[-1]
    last.setdefault("tool_calls", []).append(call)
    out.origins[-1].calls.append(where)


def _function_call_output(item: dict[str, Any], where: str, out: _Messages) -> None:
    output = _content(item["output"], join_param(where, "output"))
    message = {"role": ROLE_TOOL, "tool_call_id": item["call_id"], CONTENT: output}
    out.add(message, Origin(where, keys=dict(OUTPUT_KEYS)))


def _dropped(_item: dict[str, Any], _where: str, _out: _Messages) -> None:
    """An item the chat request has no place for (an earlier turn's reasoning)."""


# An item type's translation (spec/responses/input.yaml items.*.translation) -> the rule.
ITEMS_RULES: dict[str, Callable[[dict[str, Any], str, _Messages], None]] = {
    "message": _message,
    "function_call": _function_call,
    "function_call_output": _function_call_output,
    "dropped": _dropped,
}
implements("responses_items", ITEMS_RULES)


def input_messages(value: str | list[Any], where: str, origins: list[Origin]) -> list[Any]:
    """The chat messages of the input (a string: one user message)."""
    out = _Messages(origins)
    if isinstance(value, str):
        out.add({"role": ROLE_USER, CONTENT: value}, Origin(where))
        return out.messages
    for i, item in enumerate(value):
        at = join_param(where, i)
        if isinstance(item, dict) and "type" not in item and "role" in item:
            item = {**item, "type": ITEM_MESSAGE}  # OpenAI's easy input message
        kind = kind_of(item, at, ITEMS, REFUSED_ITEMS)
        spec = ITEMS[kind]
        ITEMS_RULES[spec["translation"]](shaped(item, spec, at), at, out)
    return out.messages
