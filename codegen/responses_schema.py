"""The JSON Schema of a Responses request body (POST /v1/responses), from spec/responses/.

For the OpenAPI targets and the generated route table, like codegen.chat_schema's chat
request. It describes the shape a client sends: the translated item, part, tool, tool_choice
and text.format shapes, each key's schema and treatment. The translation
(runtime/front/responses_api/) and then the chat validator apply what a schema cannot state,
so a body that passes this schema may still be refused with a clear error.
"""

from __future__ import annotations

import copy
from typing import Any

from codegen import responses_tables as T
from codegen.chat_schema import horde_schema
from codegen.spec import Spec


def _shape(kind: str, entry: dict[str, Any], *, type_required: bool = True) -> dict[str, Any]:
    """An object of this ``type`` with the entry's keys (unknown keys are dropped, so open)."""
    required = [*(["type"] if type_required else []), *entry.get("required", [])]
    return {
        "type": "object",
        "description": entry["description"],
        "required": required,
        "properties": {"type": {"const": kind}, **copy.deepcopy(entry.get("keys", {}))},
    }


def _parts(spec: Spec) -> dict[str, Any]:
    parts = spec[T.INPUT_FILE]["content_parts"]
    return {"anyOf": [_shape(t, e) for t, e in parts.items()]}


def _items(spec: Spec) -> dict[str, Any]:
    data = spec[T.INPUT_FILE]
    shapes = []
    for kind, entry in data["items"].items():
        # a message may leave its type out (OpenAI's EasyInputMessage)
        shape = _shape(kind, entry, type_required=kind != "message")
        for key in ("content", "output"):
            value = shape["properties"].get(key, {})
            for variant in value.get("anyOf", []):
                if variant.get("type") == "array":
                    variant["items"] = _parts(spec)
        shapes.append(shape)
    return {"anyOf": shapes}


def _closed(kind: str, entry: dict[str, Any]) -> dict[str, Any]:
    return {**_shape(kind, entry), "additionalProperties": False}


def _property(name: str, p: dict[str, Any], spec: Spec) -> dict[str, Any]:
    schema: dict[str, Any] = copy.deepcopy(p["schema"])
    schema["description"] = f"[{p['treatment']}] {p['description']}"
    if "default" in p:
        schema["default"] = p["default"]
    data = spec[T.INPUT_FILE]
    if p.get("translation") == "input":
        for variant in schema["anyOf"]:
            if variant.get("type") == "array":
                variant["items"] = _items(spec)
    elif p.get("translation") == "tools":
        schema["items"] = _shape("function", data["tools"]["function"])
    elif p.get("translation") == "tool_choice":
        function = _shape("function", data["tool_choice"]["function"])
        schema["anyOf"] = [{"enum": list(data["tool_choice"]["modes"])}, function]
    elif p.get("translation") == "text_format":
        schema = {
            "description": schema["description"],
            "anyOf": [_closed(t, e) for t, e in data["text_formats"].items()],
        }
    if p.get("keys"):
        schema["additionalProperties"] = False
        schema["properties"] = {k: _property(k, v, spec) for k, v in p["keys"].items()}
    return schema


def responses_request_schema(spec: Spec) -> dict[str, Any]:
    """The body of POST /v1/responses."""
    params = spec[T.PARAMETERS_FILE]["parameters"]
    props = {name: _property(name, p, spec) for name, p in params.items()}
    props["horde"] = horde_schema(spec)
    return {
        "type": "object",
        "description": (
            "An OpenAI Responses body plus the horde object and models, translated into the "
            "chat request a chat completion makes."
        ),
        "additionalProperties": False,
        "anyOf": [{"required": ["model"]}, {"required": ["models"]}],
        "properties": props,
    }
