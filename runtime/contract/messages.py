"""The messages array: roles, content parts, kept and dropped keys, tool-history order.

Unknown keys inside a message or a content part are dropped and not forwarded, as OpenAI
ignores them (the OpenAI SDK replays streamed replies with its own fields); a known key the
horde cannot serve is refused. ``tool_calls`` is allowed only on assistant messages, and
an assistant's calls must be answered by tool messages right after it.
"""

from __future__ import annotations

import math
from typing import Any

from generated.chat.names import PARAM_MESSAGES, ROLE_ASSISTANT, ROLE_TOOL
from generated.chat.tables import (
    CHARS_PER_TOKEN_ESTIMATE,
    CONTENT_PARTS,
    REFUSED_PARTS,
    REFUSED_ROLES,
    ROLES,
)
from generated.errors import (
    InvalidChatParameter,
    OrphanToolMessage,
    ToolCallsNotOnAssistant,
    UnansweredToolCalls,
    UnsupportedChatParameter,
)
from runtime.contract.checks import check, join_param, kind_of, wrong_type

_TOOL_CALL_SCHEMA = {
    "type": "object",
    "required": ["id", "type", "function"],
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "type": {"enum": ["function"]},
        "function": {
            "type": "object",
            "required": ["name", "arguments"],
            "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}},
        },
    },
}


def _part(part: Any, allowed: list[str], param: str) -> dict[str, Any]:
    kind = kind_of(part, param, allowed, REFUSED_PARTS)
    keys = CONTENT_PARTS[kind]["keys"]
    check(part, {"type": "object", "required": list(keys), "properties": keys}, param)
    kept = {"type": kind, **{k: part[k] for k in keys}}
    if kind == "image_url":
        kept["image_url"] = {k: v for k, v in part["image_url"].items() if k in ("url", "detail")}
    return kept


def _content(message: dict[str, Any], rules: dict[str, Any], param: str) -> Any:
    content = message.get("content")
    where = join_param(param, "content")
    if content is None:
        if rules["required"] and not rules["nullable"]:
            raise InvalidChatParameter(
                detail=f"Missing required parameter: '{where}'.", param=where
            )
        return None
    if isinstance(content, str):
        return content
    check(content, {"type": "array", "minItems": 1, "maxItems": rules["max_parts"]}, where)
    return [_part(p, rules["parts"], join_param(where, i)) for i, p in enumerate(content)]


def _tool_calls(calls: Any, schema: dict[str, Any], param: str) -> list[dict[str, Any]]:
    check(calls, schema, param)  # the array and its cap, before any call is checked
    kept: list[dict[str, Any]] = []
    for i, call in enumerate(calls):
        where = join_param(param, i)
        if isinstance(call, dict) and call.get("type") == "custom":
            raise UnsupportedChatParameter(
                key=join_param(where, "type") + " custom",
                reason="Custom tools are not served; use function tools.",
                param=join_param(where, "type"),
            )
        check(call, _TOOL_CALL_SCHEMA, where)
        fn = call["function"]
        kept.append(
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": fn["name"], "arguments": fn["arguments"]},
            }
        )
    return kept


def _message(message: Any, index: int) -> dict[str, Any]:
    param = f"{PARAM_MESSAGES}.[{index}]"
    if not isinstance(message, dict):
        raise InvalidChatParameter(detail=wrong_type(param, "an object", message), param=param)
    role = message.get("role")
    if isinstance(role, str) and role in REFUSED_ROLES:  # a list or object: not a key
        raise UnsupportedChatParameter(
            key=f"{param}.role {role}", reason=REFUSED_ROLES[role], param=f"{param}.role"
        )
    if not isinstance(role, str) or role not in ROLES:
        values = ", ".join(f"'{r}'" for r in ROLES)
        raise InvalidChatParameter(
            detail=f"Invalid value for '{param}.role': {role!r}. Supported values are: {values}.",
            param=f"{param}.role",
        )
    if message.get("tool_calls") is not None and role != ROLE_ASSISTANT:
        raise ToolCallsNotOnAssistant(index=index, role=role, param=f"{param}.tool_calls")
    rules = ROLES[role]
    kept: dict[str, Any] = {"role": role}
    content = _content(message, rules["content"], param)
    if content is not None or "content" in message:
        kept["content"] = content
    kept.update(_keys(message, rules, param))
    if role == ROLE_ASSISTANT and not kept.get("content") and not kept.get("tool_calls"):
        where = join_param(param, "content")
        raise InvalidChatParameter(
            detail=f"Missing required parameter: '{where}' (or 'tool_calls').", param=where
        )
    return kept


def _keys(message: dict[str, Any], rules: dict[str, Any], param: str) -> dict[str, Any]:
    """The role's keys besides role and content: refused, required, kept (checked)."""
    kept: dict[str, Any] = {}
    for key, reason in rules["refused_keys"].items():
        if message.get(key) is not None:
            where = join_param(param, key)
            raise UnsupportedChatParameter(key=where, reason=reason, param=where)
    for key in rules["required_keys"]:
        if message.get(key) is None:
            where = join_param(param, key)
            raise InvalidChatParameter(
                detail=f"Missing required parameter: '{where}'.", param=where
            )
    for key, schema in rules["keys"].items():
        value = message.get(key)
        if value is None:
            continue
        where = join_param(param, key)
        if key == "tool_calls":
            kept[key] = _tool_calls(value, schema, where)
        else:
            check(value, schema, where)
            kept[key] = value
    return kept


def _check_tool_history(messages: list[dict[str, Any]]) -> None:
    """Every call answered by the tool messages right after its assistant message.

    Linear in calls plus answers: the open calls are counted by id (an id may repeat), so
    an answer costs one lookup however many calls are open."""
    pending: dict[str, int] = {}
    opened_at = -1
    for i, message in enumerate(messages):
        if message["role"] == ROLE_TOOL:
            answered = message["tool_call_id"]
            if not pending.get(answered):
                raise OrphanToolMessage(param=f"{PARAM_MESSAGES}.[{i}].role")
            pending[answered] -= 1
            continue
        _unanswered(pending, opened_at)
        pending = {}
        for call in message.get("tool_calls") or []:
            pending[call["id"]] = pending.get(call["id"], 0) + 1
        opened_at = i
    _unanswered(pending, opened_at)


def _unanswered(pending: dict[str, int], opened_at: int) -> None:
    """Refuse the calls still open when their assistant message's answers ended."""
    ids = [call_id for call_id, count in pending.items() for _ in range(count)]
    if ids:
        where = f"{PARAM_MESSAGES}.[{opened_at}].role"
        raise UnansweredToolCalls(ids=", ".join(ids), param=where)


def validate_messages(messages: Any) -> list[dict[str, Any]]:
    """The normalised messages (unknown keys dropped), or the refusal."""
    check(messages, {"type": "array", "minItems": 1}, PARAM_MESSAGES)
    kept = [_message(m, i) for i, m in enumerate(messages)]
    _check_tool_history(kept)
    return kept


def messages_for_worker(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as the worker receives them: developer is sent as system."""
    return [{**m, "role": ROLES[m["role"]]["sent_as"]} for m in messages]


def image_parts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every image_url part, in order."""
    return [
        part
        for m in messages
        if isinstance(m.get("content"), list)
        for part in m["content"]
        if part["type"] == "image_url"
    ]


def text_chars(messages: list[dict[str, Any]]) -> int:
    """Characters the context estimate counts: text, refusals, tool call names and arguments.

    The one count of a conversation's characters: the max_context_length measure, context
    fit, the chat plan's reserve and the front's estimated prompt usage all use it.
    """
    total = 0
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(p.get("text") or p.get("refusal") or "") for p in content)
        for call in m.get("tool_calls") or []:
            total += len(call["function"]["name"]) + len(call["function"]["arguments"])
    return total


def estimated_tokens(chars: int) -> int:
    """Tokens ``chars`` characters are estimated at: spec/workers/limits.yaml's
    chars_per_token_estimate, rounded up (the reply's charge has its own ratio, pricing)."""
    return math.ceil(chars / CHARS_PER_TOKEN_ESTIMATE)
