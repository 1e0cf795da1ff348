"""JSON Schemas of the chat request body and of a worker's chat declaration.

Built from spec/chat/ and spec/workers/ for the OpenAPI targets (and the generated route
table). Both are JSON Schema 2020-12 dicts, OpenAPI-3.1 compatible. They describe the
shape a client or worker sends; the validator (runtime/contract/) applies the rules
a schema cannot state (treatments, defaults counted as omitted, tool-history order, strict
schemas), so a body that passes these schemas may still be refused with a clear error.
"""

from __future__ import annotations

import copy
from typing import Any

from codegen import chat_tables
from codegen.spec import Spec


def _message_schema(spec: Spec) -> dict[str, Any]:
    m = chat_tables.messages(spec)
    variants = []
    for role, r in m["roles"].items():
        parts = [
            {
                "type": "object",
                "required": ["type", *m["parts"][t]["keys"]],
                "properties": {"type": {"const": t}, **copy.deepcopy(m["parts"][t]["keys"])},
            }
            for t in r["content"]["parts"]
        ]
        content: dict[str, Any] = {
            "anyOf": [
                {"type": "string"},
                {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": r["content"]["max_parts"],
                    "items": {"anyOf": parts},
                },
            ]
        }
        if r["content"]["nullable"]:
            content["anyOf"].append({"type": "null"})
        required = ["role", *(["content"] if r["content"]["required"] else []), *r["required_keys"]]
        variants.append(
            {
                "type": "object",
                "description": spec[chat_tables.MESSAGES_FILE]["roles"][role]["description"],
                "required": required,
                "properties": {
                    "role": {"const": role},
                    "content": content,
                    **copy.deepcopy(r["keys"]),
                },
            }
        )
    return {"oneOf": variants}


def horde_schema(spec: Spec) -> dict[str, Any]:
    keys = spec[chat_tables.HORDE_FILE]["keys"]
    return {
        "type": ["object", "null"],
        "description": "The horde extension object; unknown keys are refused.",
        "additionalProperties": False,
        "properties": {
            k: {
                **copy.deepcopy(v["schema"]),
                "description": v["description"],
                "default": v["default"],
            }
            for k, v in keys.items()
        },
    }


def chat_request_schema(spec: Spec) -> dict[str, Any]:
    """The body of POST /v1/chat/completions and of the native chat async route."""
    props: dict[str, Any] = {}
    for name, p in spec[chat_tables.PARAMETERS_FILE]["parameters"].items():
        schema = copy.deepcopy(p["schema"])
        schema["description"] = f"[{p['treatment']}] {p['description']}"
        if "default" in p:
            schema["default"] = p["default"]
        props[name] = schema
    props["messages"] = {**props["messages"], "items": _message_schema(spec)}
    props["horde"] = horde_schema(spec)
    return {
        "type": "object",
        "description": "An OpenAI chat-completions body plus the horde object and models.",
        "additionalProperties": False,
        "required": ["messages"],
        "anyOf": [{"required": ["model"]}, {"required": ["models"]}],
        "properties": props,
    }


def worker_declaration_schema(spec: Spec) -> dict[str, Any]:
    """The chat declaration fields a worker adds to its text pop body."""
    names = {
        "features": chat_tables.features(spec),
        "guarantees": chat_tables.guarantees(spec),
        "guarantee_scopes": chat_tables.guarantee_scopes(spec),
    }
    props: dict[str, Any] = {}
    for key, d in spec[chat_tables.DECLARATION_FILE]["declaration"].items():
        schema = copy.deepcopy(d["schema"])
        schema["description"] = d["description"]
        if "default" in d:
            schema["default"] = d["default"]
        kinds = d.get("names", [])
        if set(kinds) & set(names):
            schema["items"] = {"enum": [n for k in kinds for n in names.get(k, [])]}
        if "limits" in kinds:
            schema["additionalProperties"] = False
            schema["properties"] = {
                name: {"type": lim["type"], "minimum": lim["minimum"]}
                for name, lim in chat_tables.limits(spec).items()
            }
        props[key] = schema
    return {"type": "object", "properties": props}
