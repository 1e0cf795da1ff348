"""The Responses API's tables, read once from spec/responses/ for its targets and its schema.

Nothing here is translation logic, only the reshaping of spec/responses/*.yaml into plain
dicts and lists the generated modules inline (the engine that applies them is
runtime/front/responses_api/).
"""

from __future__ import annotations

from typing import Any

from codegen import chat_tables
from codegen.errors import SpecError, SpecErrors
from codegen.spec import Spec

PARAMETERS_FILE = "responses/parameters.yaml"
INPUT_FILE = "responses/input.yaml"
REPLY_FILE = "responses/reply.yaml"
ALL_FILES = (PARAMETERS_FILE, INPUT_FILE, REPLY_FILE)


def _key(p: dict[str, Any]) -> dict[str, Any]:
    """One parameter (or nested key) as the engine reads it."""
    has_default = "default" in p
    return {
        "treatment": p["treatment"],
        "schema": p["schema"],
        "has_default": has_default,
        "default": p.get("default"),
        "noop_values": ([p["default"]] if has_default else []) + list(p.get("noop_values", [])),
        "reason": p.get("reason"),
        "chat": p.get("chat"),
        "translation": p.get("translation"),
        "keys": {k: _key(v) for k, v in p.get("keys", {}).items()},
    }


def parameters(spec: Spec) -> dict[str, dict[str, Any]]:
    return {name: _key(p) for name, p in spec[PARAMETERS_FILE]["parameters"].items()}


def echo(spec: Spec) -> dict[str, Any]:
    """Parameter -> the value the Response object repeats when the client sent none."""
    return {
        name: p["echo"] for name, p in spec[PARAMETERS_FILE]["parameters"].items() if "echo" in p
    }


def chat_names(spec: Spec) -> dict[str, str]:
    """Chat parameter -> the Responses key (dotted when nested) whose value it carries."""
    out: dict[str, str] = {}

    def walk(prefix: str, keys: dict[str, Any]) -> None:
        for name, p in keys.items():
            where = f"{prefix}{name}"
            if "chat" in p:
                out[p["chat"]] = where
            walk(f"{where}.", p.get("keys", {}))

    walk("", spec[PARAMETERS_FILE]["parameters"])
    return out


def translations(spec: Spec) -> list[tuple[str, str]]:
    """(dotted key, rule) of every key a translation rule handles."""
    out: list[tuple[str, str]] = []

    def walk(prefix: str, keys: dict[str, Any]) -> None:
        for name, p in keys.items():
            if "translation" in p:
                out.append((f"{prefix}{name}", p["translation"]))
            walk(f"{prefix}{name}.", p.get("keys", {}))

    walk("", spec[PARAMETERS_FILE]["parameters"])
    return out


def _shape(entry: dict[str, Any]) -> dict[str, Any]:
    return {"required": list(entry.get("required", [])), "keys": dict(entry.get("keys", {}))}


def input_tables(spec: Spec) -> dict[str, Any]:
    data = spec[INPUT_FILE]
    return {
        "items": {
            t: {"translation": e["translation"], **_shape(e)} for t, e in data["items"].items()
        },
        "tool_history_refusals": dict(data["tool_history_refusals"]),
        "refused_items": dict(data["refused_items"]),
        "parts": {
            t: {
                "becomes": e["becomes"],
                "refused_keys": dict(e.get("refused_keys", {})),
                **_shape(e),
            }
            for t, e in data["content_parts"].items()
        },
        "refused_parts": dict(data["refused_parts"]),
        "tool_function": _shape(data["tools"]["function"]),
        "refused_tools": dict(data["refused_tools"]),
        "tool_choice_modes": tuple(data["tool_choice"]["modes"]),
        "tool_choice_function": _shape(data["tool_choice"]["function"]),
        "refused_tool_choices": dict(data["refused_tool_choices"]),
        "text_formats": {t: _shape(e) for t, e in data["text_formats"].items()},
    }


def reply_tables(spec: Spec) -> dict[str, Any]:
    data = spec[REPLY_FILE]
    return {
        "id_prefixes": dict(data["ids"]),
        "statuses": {
            reason: (entry["status"], entry.get("incomplete_reason"))
            for reason, entry in data["finish_reasons"].items()
        },
    }


def check(spec: Spec) -> None:
    """What the files' schemas cannot say: every chat finish reason has a status, every part
    becomes a chat content part, every text format is a chat response_format type."""
    problems: list[SpecError] = []
    reasons = list(spec[chat_tables.REPLY_FILE]["finish_reasons"])
    missing = [r for r in reasons if r not in spec[REPLY_FILE]["finish_reasons"]]
    if missing:
        problems.append(
            SpecError(
                f"spec/{REPLY_FILE}",
                "finish_reasons",
                f"no status for the chat finish reasons {missing}",
                "give each finish reason of spec/chat/reply.yaml its status",
            )
        )
    messages = chat_tables.messages(spec)
    for part, entry in spec[INPUT_FILE]["content_parts"].items():
        if entry["becomes"] not in messages["parts"]:
            problems.append(
                SpecError(
                    f"spec/{INPUT_FILE}",
                    f"content_parts.{part}.becomes",
                    f"{entry['becomes']!r} is not a chat content part",
                    f"use one of {sorted(messages['parts'])} (spec/chat/messages.yaml)",
                )
            )
    formats = sorted(messages["response_format_types"])
    if sorted(spec[INPUT_FILE]["text_formats"]) != formats:
        problems.append(
            SpecError(
                f"spec/{INPUT_FILE}",
                "text_formats",
                "the text formats differ from the chat response_format types",
                f"give exactly {formats} (spec/chat/messages.yaml response_format)",
            )
        )
    if problems:
        raise SpecErrors(problems)
