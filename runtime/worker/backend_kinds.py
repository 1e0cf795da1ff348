"""Per-backend mapping: a chat job's payload -> the body this backend accepts.

Every backend gets the conversation as messages (it renders the model's own template) and
every sampling field the job carries. vLLM, llama.cpp's own server, koboldcpp and Ollama
take OpenAI's shapes as they are; llama-cpp-python needs its response_format, tool_choice
and some messages reshaped, as measured (``BackendKind`` says how and why).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from generated.chat.names import (
    PARAM_MESSAGES,
    PARAM_MODEL,
    PARAM_PARALLEL_TOOL_CALLS,
    PARAM_REASONING_EFFORT,
    PARAM_RESPONSE_FORMAT,
    PARAM_STREAM,
    PARAM_STREAM_OPTIONS,
    PARAM_TOOL_CHOICE,
    PARAM_TOOLS,
    RESPONSE_FORMAT_JSON_OBJECT,
    RESPONSE_FORMAT_JSON_SCHEMA,
)
from generated.chat.tables import SAMPLING_DEFAULTS

# OpenAI wire values (the backend's protocol, not horde contract names).
WIRE_REQUIRED = "required"
WIRE_AUTO = "auto"
WIRE_FUNCTION = "function"
WIRE_TEXT = "text"
WIRE_REFUSAL = "refusal"


@dataclass(frozen=True)
class BackendKind:
    """How one backend's accepted body differs from OpenAI's.

    llama-cpp-python (measured on 0.3.36) refuses OpenAI's ``json_schema`` response_format
    with a 500 but takes ``{"type": "json_object", "schema": ...}``; it forces a *named*
    tool_choice by grammar and ignores ``required``, so ``required`` with one tool goes as
    that named function, and among several as ``auto`` with a schema allowing exactly one
    call (``{"name": ..., "arguments": ...}``), turned back into a tool call by
    ``backend_completion``; it ignores reasoning_effort and parallel_tool_calls. It refuses
    (500) an assistant message with null content (what the OpenAI SDK, LangChain and
    openai-agents send beside tool_calls) and a content part list on any role but user:
    null content goes as ``""`` and text and refusal parts are joined into one string."""

    name: str
    owned_by: tuple[str, ...]
    json_schema_as_json_object: bool = False
    single_required_as_named: bool = False
    several_required_as_schema: bool = False
    sends_reasoning_effort: bool = True
    sends_parallel_tool_calls: bool = True
    joins_text_parts: bool = False
    null_content_as_empty: bool = False
    # Where the exact counter gets the rendered prompt's count (see counter.py).
    count_route: str | None = None


LLAMA_CPP_PYTHON = BackendKind(
    "llama-cpp-python",
    ("me",),
    json_schema_as_json_object=True,
    single_required_as_named=True,
    several_required_as_schema=True,
    sends_reasoning_effort=False,
    sends_parallel_tool_calls=False,
    joins_text_parts=True,
    null_content_as_empty=True,
    count_route="/extras/tokenize/count",
)
LLAMA_CPP = BackendKind("llama.cpp", ("llamacpp",))
VLLM = BackendKind("vllm", ("vllm",))
KOBOLDCPP = BackendKind("koboldcpp", ("koboldcpp",), count_route="/api/extra/tokencount")
OLLAMA = BackendKind("ollama", ("library", "ollama"))
GENERIC = BackendKind("openai", ())
KINDS = {
    kind.name: kind for kind in (LLAMA_CPP_PYTHON, LLAMA_CPP, VLLM, KOBOLDCPP, OLLAMA, GENERIC)
}


def detect_kind(model_entry: dict[str, Any], override: str | None = None) -> BackendKind:
    """The kind named by ``override``, else the one whose ``owned_by`` the model entry has."""
    if override is not None:
        return KINDS[override]
    owner = str(model_entry.get("owned_by", "")).lower()
    for kind in KINDS.values():
        if owner in kind.owned_by:
            return kind
    return GENERIC


def _shaped(kind: BackendKind, message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if content is None and kind.null_content_as_empty:
        return {**message, "content": ""}
    if (
        kind.joins_text_parts
        and isinstance(content, list)
        and all(isinstance(p, dict) and p.get("type") in (WIRE_TEXT, WIRE_REFUSAL) for p in content)
    ):
        return {**message, "content": "".join(str(p.get(p["type"]) or "") for p in content)}
    return message


def backend_messages(kind: BackendKind, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation in the shapes this backend accepts (see the module docstring)."""
    return [_shaped(kind, m) for m in messages]


def _response_format(kind: BackendKind, value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    if kind.json_schema_as_json_object and value.get("type") == RESPONSE_FORMAT_JSON_SCHEMA:
        schema = (value.get(RESPONSE_FORMAT_JSON_SCHEMA) or {}).get("schema") or {}
        return {"type": RESPONSE_FORMAT_JSON_OBJECT, "schema": schema}
    return value


def _tool_choice(kind: BackendKind, choice: Any, tools: list[dict[str, Any]]) -> Any:
    if kind.single_required_as_named and choice == WIRE_REQUIRED and len(tools) == 1:
        return {"type": WIRE_FUNCTION, WIRE_FUNCTION: {"name": tools[0][WIRE_FUNCTION]["name"]}}
    return choice


def _required_by_schema(kind: BackendKind, payload: dict[str, Any]) -> bool:
    tools = payload.get(PARAM_TOOLS) or []
    required = payload.get(PARAM_TOOL_CHOICE) == WIRE_REQUIRED
    return kind.several_required_as_schema and required and len(tools) > 1


def _call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """One call to any of ``tools``: its name and arguments valid for its parameters."""
    calls = []
    for tool in tools:
        function = tool[WIRE_FUNCTION]
        calls.append(
            {
                "type": "object",
                "properties": {
                    "name": {"const": function["name"]},
                    "arguments": function.get("parameters") or {"type": "object"},
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    return {"anyOf": calls}


def backend_completion(
    kind: BackendKind, payload: dict[str, Any], completion: dict[str, Any]
) -> dict[str, Any]:
    """The backend's completion of ``payload`` as OpenAI's: the call a ``required`` among
    several asked for as a schema (see ``chat_body``) back as a tool call. Content that is
    not such a call (cut off by max_tokens) stays content: the horde refuses a forced
    choice without a call under strict."""
    if not _required_by_schema(kind, payload):
        return completion
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return completion
    message = choices[0].get("message") or {}
    try:
        call = json.loads(message.get("content") or "")
    except ValueError:
        return completion
    names = {tool[WIRE_FUNCTION]["name"] for tool in payload[PARAM_TOOLS]}
    if not isinstance(call, dict) or call.get("name") not in names:
        return completion
    function = {"name": call["name"], "arguments": json.dumps(call.get("arguments") or {})}
    called = {
        **message,
        "content": None,
        "tool_calls": [{"type": WIRE_FUNCTION, WIRE_FUNCTION: function}],
    }
    choice = {**choices[0], "message": called, "finish_reason": "tool_calls"}
    return {**completion, "choices": [choice, *choices[1:]]}


def chat_body(
    kind: BackendKind, payload: dict[str, Any], model: str, *, stream: bool = False
) -> dict[str, Any]:
    """The backend request for a chat job's payload (the stored request stays as it was)."""
    body: dict[str, Any] = {
        PARAM_MODEL: model,
        PARAM_MESSAGES: backend_messages(kind, payload[PARAM_MESSAGES]),
    }
    for key in SAMPLING_DEFAULTS:
        if payload.get(key) is not None:
            body[key] = payload[key]
    tools = payload.get(PARAM_TOOLS)
    if tools:
        body[PARAM_TOOLS] = tools
        choice = payload.get(PARAM_TOOL_CHOICE)
        if choice is not None:
            body[PARAM_TOOL_CHOICE] = _tool_choice(kind, choice, tools)
        if kind.sends_parallel_tool_calls and payload.get(PARAM_PARALLEL_TOOL_CALLS) is not None:
            body[PARAM_PARALLEL_TOOL_CALLS] = payload[PARAM_PARALLEL_TOOL_CALLS]
    if payload.get(PARAM_RESPONSE_FORMAT) is not None:
        body[PARAM_RESPONSE_FORMAT] = _response_format(kind, payload[PARAM_RESPONSE_FORMAT])
    if _required_by_schema(kind, payload):
        body[PARAM_TOOL_CHOICE] = WIRE_AUTO  # the grammar forces the call, not the choice
        schema = _call_schema(payload[PARAM_TOOLS])
        body[PARAM_RESPONSE_FORMAT] = {"type": RESPONSE_FORMAT_JSON_OBJECT, "schema": schema}
    if kind.sends_reasoning_effort and payload.get(PARAM_REASONING_EFFORT) is not None:
        body[PARAM_REASONING_EFFORT] = payload[PARAM_REASONING_EFFORT]
    if stream:
        body[PARAM_STREAM] = True
        # the usage chunk (llama.cpp's server, vLLM, Ollama); backends without one ignore it
        body[PARAM_STREAM_OPTIONS] = {"include_usage": True}
    return body
