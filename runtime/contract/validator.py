"""The one chat request validator, shared by the native chat route and the front.

``validate_chat_request`` returns the normalised request: unknown keys inside messages,
tools and tool_choice dropped; fields at their default left out, except capability fields
(tools, response_format); ``models`` a sorted set. Otherwise it raises a
``generated.errors`` class: 400 UnsupportedChatParameter naming the key (OpenAI's message
where OpenAI refuses too), InvalidChatParameter, or 404 model_not_found for an id with a colon.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from generated.chat.names import (
    HORDE_OPENAI_GUARDS,
    PARAM_HORDE,
    PARAM_MAX_COMPLETION_TOKENS,
    PARAM_MAX_TOKENS,
    PARAM_MESSAGES,
    PARAM_MODEL,
    PARAM_MODELS,
    PARAM_PARALLEL_TOOL_CALLS,
    PARAM_RESPONSE_FORMAT,
    PARAM_STREAM,
    PARAM_STREAM_OPTIONS,
    PARAM_TOOL_CHOICE,
    PARAM_TOOLS,
    RESPONSE_FORMAT_JSON_OBJECT,
    TOOL_CHOICE_AUTO,
)
from generated.chat.tables import FRONT_DEFAULT_DROPS, HORDE_KEYS, PARAMETERS
from generated.errors import (
    InvalidChatParameter,
    JsonNotMentioned,
    ModelNotFound,
    StreamOptionsWithoutStream,
    ToolsRequired,
    UnsupportedChatParameter,
)
from runtime.contract.caps import check_item_caps
from runtime.contract.checks import check, same
from runtime.contract.messages import validate_messages
from runtime.contract.registry import implements
from runtime.contract.tools import validate_response_format, validate_tool_choice, validate_tools

_UNKNOWN = "Unrecognized request argument supplied: {}"


def _at_default(entry: Mapping[str, Any], value: Any) -> bool:
    return any(same(value, noop) for noop in entry["noop_values"])


def _kept(_where: str, _value: Any, _entry: Mapping[str, Any]) -> bool:
    """Capability fields are never dropped, even at their default."""
    return True


def _kept_unless_default(_where: str, value: Any, entry: Mapping[str, Any]) -> bool:
    return not _at_default(entry, value)


def _refused_unless_default(where: str, value: Any, entry: Mapping[str, Any]) -> bool:
    if _at_default(entry, value):
        return False
    raise UnsupportedChatParameter(key=where, reason=entry["reason"], param=where)


# A parameter's treatment (spec/chat/parameters.yaml) -> whether a non-null value is kept
# (False: left out as the default), or the refusal.
TREATMENTS: dict[str, Callable[[str, Any, Mapping[str, Any]], bool]] = {
    "supported": _kept_unless_default,
    "capability": _kept,
    "refused_unless_default": _refused_unless_default,
    "dropped_at_default": _refused_unless_default,
    "refused": _refused_unless_default,
}
implements("treatments", TREATMENTS)


def kept(where: str, value: Any, entry: Mapping[str, Any]) -> bool:
    """Whether the value of a key whose spec entry (a table row with schema, treatment,
    noop_values and reason) is ``entry`` is kept; False when it counts as omitted (null, or
    at its default). Raises the refusal of a value off its schema or of a refused key."""
    check(value, entry["schema"], where)
    return value is not None and TREATMENTS[entry["treatment"]](where, value, entry)


def unknown_key(where: str) -> UnsupportedChatParameter:
    """The refusal of a key no table knows (OpenAI's wording)."""
    return UnsupportedChatParameter(key=where, reason=_UNKNOWN.format(where), param=where)


def _top_level(body: dict[str, Any]) -> dict[str, Any]:
    """Each key checked against its schema and treatment; defaults left out."""
    kept_keys: dict[str, Any] = {}
    for key, value in body.items():
        spec = PARAMETERS.get(key)
        if spec is None:
            raise unknown_key(key)
        if kept(key, value, spec):
            kept_keys[key] = value
    return kept_keys


def validate_horde(obj: dict[str, Any]) -> dict[str, Any]:
    """The horde object's keys that differ from their defaults; unknown keys refused."""
    kept: dict[str, Any] = {}
    for key, value in obj.items():
        where = f"{PARAM_HORDE}.{key}"
        if key not in HORDE_KEYS:
            raise unknown_key(where)
        check(value, HORDE_KEYS[key]["schema"], where)
        if not same(value, HORDE_KEYS[key]["default"]):
            kept[key] = value
    return kept


def _models(request: dict[str, Any]) -> None:
    if PARAM_MODEL not in request and PARAM_MODELS not in request:
        raise InvalidChatParameter(detail="you must provide a model parameter", param=PARAM_MODEL)
    for i, name in enumerate([request.get(PARAM_MODEL), *request.get(PARAM_MODELS, [])]):
        if name is not None and ":" in name:
            where = PARAM_MODEL if i == 0 else f"{PARAM_MODELS}.[{i - 1}]"
            raise ModelNotFound(model=name, param=where)
    if PARAM_MODELS in request:
        request[PARAM_MODELS] = sorted(set(request[PARAM_MODELS]))


def _mentions_json(messages: list[dict[str, Any]]) -> bool:
    for m in messages:
        content = m.get("content")
        texts = (
            [content]
            if isinstance(content, str)
            else [p.get("text", "") for p in content or [] if isinstance(p, dict)]
        )
        if any("json" in t.lower() for t in texts):
            return True
    return False


def validate_chat_request(body: object) -> dict[str, Any]:
    """The normalised chat request, or a ``generated.errors`` refusal."""
    if not isinstance(body, dict):
        raise InvalidChatParameter(detail="The request body must be a JSON object.", param=None)
    check_item_caps(body)  # lengths first: no per-item work on an array over its cap
    request = _top_level(body)
    _models(request)
    if PARAM_MESSAGES not in request:
        raise InvalidChatParameter(
            detail=f"Missing required parameter: '{PARAM_MESSAGES}'.", param=PARAM_MESSAGES
        )
    request[PARAM_MESSAGES] = validate_messages(request[PARAM_MESSAGES])
    tools = validate_tools(request[PARAM_TOOLS]) if PARAM_TOOLS in request else None
    for key in (PARAM_TOOL_CHOICE, PARAM_PARALLEL_TOOL_CALLS):
        if body.get(key) is not None and tools is None:
            raise ToolsRequired(key=key, param=key)
    if tools is not None:
        request[PARAM_TOOLS] = tools
        if PARAM_TOOL_CHOICE in request:
            choice = validate_tool_choice(request[PARAM_TOOL_CHOICE], tools)
            if choice == TOOL_CHOICE_AUTO:
                del request[PARAM_TOOL_CHOICE]
            else:
                request[PARAM_TOOL_CHOICE] = choice
    if body.get(PARAM_STREAM_OPTIONS) is not None and not body.get(PARAM_STREAM):
        raise StreamOptionsWithoutStream()
    if PARAM_RESPONSE_FORMAT in request:
        request[PARAM_RESPONSE_FORMAT] = validate_response_format(request[PARAM_RESPONSE_FORMAT])
    horde = validate_horde(request.pop(PARAM_HORDE, None) or {})
    if horde:
        request[PARAM_HORDE] = horde
    fmt = request.get(PARAM_RESPONSE_FORMAT, {}).get("type")
    if (
        fmt == RESPONSE_FORMAT_JSON_OBJECT
        and horde.get(HORDE_OPENAI_GUARDS)
        and not _mentions_json(request[PARAM_MESSAGES])
    ):
        raise JsonNotMentioned()
    return request


def horde_option(request: dict[str, Any], key: str) -> Any:
    """A horde object key of a normalised request, or its default."""
    return request.get(PARAM_HORDE, {}).get(key, HORDE_KEYS[key]["default"])


def output_tokens(request: dict[str, Any]) -> int | None:
    """The requested output length: max_completion_tokens, else max_tokens, else None."""
    value: int | None = request.get(PARAM_MAX_COMPLETION_TOKENS, request.get(PARAM_MAX_TOKENS))
    return value


def requested_models(request: dict[str, Any]) -> list[str]:
    """Every model that may serve the request, sorted (model and models, as a set)."""
    names: set[str] = set(request.get(PARAM_MODELS, []))
    if PARAM_MODEL in request:
        names.add(request[PARAM_MODEL])
    return sorted(names)


def drop_front_defaults(body: dict[str, Any]) -> dict[str, Any]:
    """The body without the front's default no-ops (FRONT_DEFAULT_DROPS) at those values."""
    return {
        k: v
        for k, v in body.items()
        if not (k in FRONT_DEFAULT_DROPS and any(same(v, n) for n in FRONT_DEFAULT_DROPS[k]))
    }
