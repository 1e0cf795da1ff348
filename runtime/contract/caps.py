"""Item caps of a chat request, checked before any item is, so work stays bounded per byte.

``check_item_caps`` reads only lengths: top-level arrays and objects capped by their
schema (``maxItems``, ``maxProperties``), the horde object's arrays, and each message's
content parts and tool_calls. A body with a million tool calls costs one ``len`` before its
refusal (400 InvalidChatParameter, OpenAI's "array too long"), not a million schema checks.
It runs first in ``validate_chat_request``, whose checks then see capped arrays only.
"""

from __future__ import annotations

from typing import Any

from generated.chat.names import PARAM_HORDE, PARAM_MESSAGES
from generated.chat.tables import HORDE_KEYS, PARAMETERS, ROLES
from generated.errors import InvalidChatParameter
from runtime.contract.checks import join_param

TOOL_CALLS = "tool_calls"


def _bound(schema: dict[str, Any], keyword: str) -> int | None:
    """The schema's ``keyword`` (maxItems / maxProperties), or its anyOf / oneOf branch's."""
    if keyword in schema:
        return int(schema[keyword])
    for branch in (*schema.get("anyOf", ()), *schema.get("oneOf", ())):
        if keyword in branch:
            return int(branch[keyword])
    return None


def _too_long(param: str, length: int, bound: int) -> InvalidChatParameter:
    return InvalidChatParameter(
        detail=(
            f"Invalid '{param}': array too long. Expected an array with maximum length "
            f"{bound}, but got an array with length {length} instead."
        ),
        param=param,
    )


def _too_many_keys(param: str, length: int, bound: int) -> InvalidChatParameter:
    return InvalidChatParameter(
        detail=(
            f"Invalid '{param}': too many properties. Expected an object with at most "
            f"{bound} properties, but got an object with {length} properties instead."
        ),
        param=param,
    )


def _check_length(value: Any, schema: dict[str, Any], param: str) -> None:
    if isinstance(value, list):
        bound = _bound(schema, "maxItems")
        if bound is not None and len(value) > bound:
            raise _too_long(param, len(value), bound)
    elif isinstance(value, dict):
        bound = _bound(schema, "maxProperties")
        if bound is not None and len(value) > bound:
            raise _too_many_keys(param, len(value), bound)


_MAX_PARTS = max(rules["content"]["max_parts"] for rules in ROLES.values())
_MAX_TOOL_CALLS = max(
    int(rules["keys"][TOOL_CALLS].get("maxItems", 0))
    for rules in ROLES.values()
    if TOOL_CALLS in rules["keys"]
)


def _check_message(message: Any, param: str) -> None:
    if not isinstance(message, dict):
        return
    role = message.get("role")
    rules = ROLES.get(role) if isinstance(role, str) else None
    content = message.get("content")
    if isinstance(content, list):
        bound = rules["content"]["max_parts"] if rules else _MAX_PARTS
        if len(content) > bound:
            raise _too_long(join_param(param, "content"), len(content), bound)
    calls = message.get(TOOL_CALLS)
    if isinstance(calls, list):
        schema = rules["keys"].get(TOOL_CALLS) if rules else None
        bound = int(schema["maxItems"]) if schema and "maxItems" in schema else _MAX_TOOL_CALLS
        if len(calls) > bound:
            raise _too_long(join_param(param, TOOL_CALLS), len(calls), bound)


def check_item_caps(body: Any) -> None:
    """Refuse the first array or object of ``body`` longer than its cap (module docstring);
    a body of the wrong shape passes untouched (the validator refuses it with its message).
    Capped: messages, tools, stop, models, modalities, metadata, logit_bias, the horde
    object's arrays, each message's content parts (its role's ``content.max_parts``,
    spec/chat/messages.yaml) and tool_calls (their schema's ``maxItems``)."""
    if not isinstance(body, dict):
        return
    for key, value in body.items():
        spec = PARAMETERS.get(key)
        if spec is not None:
            _check_length(value, spec["schema"], key)
    messages = body.get(PARAM_MESSAGES)
    if isinstance(messages, list):
        for i, message in enumerate(messages):
            _check_message(message, join_param(PARAM_MESSAGES, i))
    horde = body.get(PARAM_HORDE)
    if isinstance(horde, dict):
        for key, value in horde.items():
            if key in HORDE_KEYS:
                _check_length(value, HORDE_KEYS[key]["schema"], join_param(PARAM_HORDE, key))
