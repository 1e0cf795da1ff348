"""The chat declaration a worker sends on every text pop, checked and completed.

``parse_worker_declaration(pop_body)`` reads chat_jobs, prompt_jobs, model_id,
chat_features, chat_limits and image_transports from the pop body, refuses a malformed one
with 400 InvalidChatDeclaration (an unknown feature or limit name gets a suggestion), and
fills what the worker left out: defaults, and each limit from the pop's own
max_context_length / max_length or the limit's when_absent value.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from generated.chat.names import DECL_CHAT_JOBS, DECL_CHAT_LIMITS, DECL_PROMPT_JOBS
from generated.chat.tables import DECLARATION, FEATURES, GUARANTEE_SCOPES, GUARANTEES, LIMITS
from generated.errors import InvalidChatDeclaration

_KNOWN = {
    "features": FEATURES,
    "guarantees": GUARANTEES,
    "guarantee_scopes": GUARANTEE_SCOPES,
    "limits": tuple(LIMITS),
}


def _refuse(key: str, problem: str) -> InvalidChatDeclaration:
    return InvalidChatDeclaration(detail=f"{key}: {problem}", param=key)


_VALIDATORS: dict[str, Draft202012Validator] = {}
"""One validator per declaration key: a key's schema comes from the spec's tables, so it is
built on the first pop that sends the key, not on every pop."""


def _check(key: str, value: Any, schema: dict[str, Any]) -> None:
    validator = _VALIDATORS.get(key)
    if validator is None:
        validator = _VALIDATORS[key] = Draft202012Validator(schema)
    error = best_match(validator.iter_errors(value))
    if error is not None:
        where = ".".join([key, *map(str, error.absolute_path)])
        raise _refuse(where, error.message)


def _names(key: str, values: Any, kinds: list[str]) -> None:
    known = [n for k in kinds for n in _KNOWN[k]]
    for name in values:
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f"; known: {', '.join(known)}"
            raise _refuse(key, f"unknown name {name!r}{hint}")


def _limits(declared: dict[str, Any], pop_body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, rule in LIMITS.items():
        value = declared.get(name)
        if value is None and rule["pop_fallback"] is not None:
            value = pop_body.get(rule["pop_fallback"])
        if value is None:
            value = rule["when_absent"]
        if value is not None:
            kind = {"type": rule["type"], "minimum": rule["minimum"]}
            _check(f"{DECL_CHAT_LIMITS}.{name}", value, kind)
        out[name] = value
    return out


DECLARATIONS_KEPT = 1024
"""Parsed declarations kept (``parse_worker_declaration``): a worker sends the same one on
every pop, and a fleet has few."""
_parsed: dict[str, dict[str, Any]] = {}
_READ = (*DECLARATION, *sorted({r["pop_fallback"] for r in LIMITS.values() if r["pop_fallback"]}))
"""What of a pop body its declaration is made of: the declaration keys and the pop's own
fields a limit falls back to."""


def parse_worker_declaration(pop_body: Any) -> dict[str, Any]:
    """The complete chat declaration of a pop body (every key present), or the refusal.

    Parsed once per declaration (the JSON of what of the body it reads) and kept: a pop
    gets its own copy of the kept one. A refused declaration is parsed again each time."""
    if not isinstance(pop_body, dict):
        raise _refuse("(body)", "the pop body must be a JSON object")
    key = json.dumps([pop_body.get(name) for name in _READ], sort_keys=True)
    parsed = _parsed.get(key)
    if parsed is None:
        parsed = _parse(pop_body)
        if len(_parsed) >= DECLARATIONS_KEPT:
            _parsed.clear()
        _parsed[key] = parsed
    return {k: v.copy() if isinstance(v, list | dict) else v for k, v in parsed.items()}


def _parse(pop_body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, rule in DECLARATION.items():
        value = pop_body.get(key)
        if value is None:
            value = rule["default"] if rule["has_default"] else None
            if value is None:
                out[key] = None
                continue
        _check(key, value, rule["schema"])
        if rule["names"]:
            _names(key, value, rule["names"])
        out[key] = value
    for key, rule in DECLARATION.items():
        if rule["required_with"] and out.get(rule["required_with"]) and out[key] is None:
            raise _refuse(key, f"required when {rule['required_with']} is true")
    if not out[DECL_CHAT_JOBS] and not out[DECL_PROMPT_JOBS]:
        problem = f"false needs {DECL_CHAT_JOBS} true (the worker would serve nothing)"
        raise _refuse(DECL_PROMPT_JOBS, problem)
    out[DECL_CHAT_LIMITS] = _limits(out[DECL_CHAT_LIMITS], pop_body)
    return out
