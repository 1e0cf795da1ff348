"""The structured chat submit checked against the stored request.

``verify_chat_reply`` returns the reply the client will receive, or raises
ChatReplyRejected naming the broken rule, so the native API faults the job on that worker.
Which rules run in which conformance mode is data (VERIFICATION_RULES; docs/design.md,
"Verification"). Content visibly cut off (a finish_reason in CONTENT_EXEMPT_FINISH_REASONS
*and* output at its length by the horde's own count) is not held to the requested JSON: a
finish_reason alone is the worker's claim.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match
from referencing.exceptions import Unresolvable

from generated.chat.names import (
    HORDE_CONFORMANCE,
    PARAM_PARALLEL_TOOL_CALLS,
    PARAM_RESPONSE_FORMAT,
    PARAM_TOOL_CHOICE,
    PARAM_TOOLS,
    REPLY_CONTENT,
    REPLY_FINISH_REASON,
    REPLY_TOOL_CALLS,
    RESPONSE_FORMAT_JSON_OBJECT,
    RESPONSE_FORMAT_JSON_SCHEMA,
    TOOL_CHOICE_NONE,
    TOOL_CHOICE_REQUIRED,
)
from generated.chat.tables_reply import (
    CONTENT_EXEMPT_FINISH_REASONS,
    VERIFICATION_REDUCTIONS,
    VERIFICATION_RULES,
)
from generated.errors import ChatReplyRejected
from runtime.contract.pricing import output_estimate
from runtime.contract.registry import implements
from runtime.contract.validator import horde_option, output_tokens

Calls = list[dict[str, Any]]
Fields = dict[str, Any]


def _names(calls: Calls) -> str:
    return ", ".join(repr(c["function"]["name"]) for c in calls) or "nothing"


def _unknown_function(
    request: dict[str, Any], _reply: dict[str, Any], calls: Calls
) -> Fields | None:
    defined = {t["function"]["name"] for t in request.get(PARAM_TOOLS) or []}
    unknown = [c for c in calls if c["function"]["name"] not in defined]
    return {"names": _names(unknown)} if unknown else None


def _duplicate_call_id(
    _request: dict[str, Any], _reply: dict[str, Any], calls: Calls
) -> Fields | None:
    seen: set[str] = set()
    for call in calls:
        if call["id"] in seen:
            return {"call_id": repr(call["id"])}
        seen.add(call["id"])
    return None


def _tool_call_under_none(
    request: dict[str, Any], _reply: dict[str, Any], calls: Calls
) -> Fields | None:
    if request.get(PARAM_TOOL_CHOICE) == TOOL_CHOICE_NONE and calls:
        return {"names": _names(calls)}
    return None


def _missing_tool_call(
    request: dict[str, Any], _reply: dict[str, Any], calls: Calls
) -> Fields | None:
    choice = request.get(PARAM_TOOL_CHOICE)
    forced = choice == TOOL_CHOICE_REQUIRED or isinstance(choice, dict)
    if forced and not calls:
        return {"choice": json.dumps(choice) if isinstance(choice, dict) else choice}
    return None


def _other_function_called(
    request: dict[str, Any], _reply: dict[str, Any], calls: Calls
) -> Fields | None:
    choice = request.get(PARAM_TOOL_CHOICE)
    if not isinstance(choice, dict):
        return None
    expected = choice["function"]["name"]
    others = [c for c in calls if c["function"]["name"] != expected]
    return {"expected": repr(expected), "names": _names(others)} if others else None


def _parse_json(text: str) -> tuple[Any, str | None]:
    def refuse_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(text, parse_constant=refuse_constant), None
    except ValueError as exc:  # JSONDecodeError is a ValueError
        return None, str(exc)


def visibly_cut_off(reply: dict[str, Any], max_length: int | None) -> bool:
    """The reply claims a cut (an exempt finish_reason) and shows it: its output estimate
    reached ``max_length``, the output length it was generated under. Unknown: not shown."""
    if reply.get(REPLY_FINISH_REASON) not in CONTENT_EXEMPT_FINISH_REASONS:
        return False
    return max_length is not None and output_estimate(reply, max_length) >= max_length


def _json_content(request: dict[str, Any], reply: dict[str, Any], calls: Calls) -> str | None:
    """The requested JSON format when the reply's content is held to it, else None."""
    kind = (request.get(PARAM_RESPONSE_FORMAT) or {}).get("type")
    if kind not in (RESPONSE_FORMAT_JSON_OBJECT, RESPONSE_FORMAT_JSON_SCHEMA):
        return None
    if calls and not reply.get(REPLY_CONTENT):
        return None
    return str(kind)


def _json_problem(kind: str, content: str | None) -> tuple[Any, str | None]:
    """(the parsed value, None) or (None, why the content is not the requested JSON)."""
    if content is None:
        return None, "the content is null"
    value, problem = _parse_json(content)
    if problem is None and kind == RESPONSE_FORMAT_JSON_OBJECT and not isinstance(value, dict):
        problem = f"the JSON is {type(value).__name__}, not an object"
    return value, problem


def _content_not_json(
    request: dict[str, Any], reply: dict[str, Any], calls: Calls
) -> Fields | None:
    kind = _json_content(request, reply, calls)
    if kind is None:
        return None
    _value, problem = _json_problem(kind, reply.get(REPLY_CONTENT))
    if problem is None:
        return None
    expected = "a JSON object" if kind == RESPONSE_FORMAT_JSON_OBJECT else "JSON"
    return {"format": kind, "expected": expected, "problem": problem}


def _schema_problem(schema: dict[str, Any], value: Any) -> tuple[str, str] | None:
    """(message, JSON path) of the best failure, or None; an unusable schema is not held
    against the worker."""
    try:
        error = best_match(Draft202012Validator(schema).iter_errors(value))
    except (SchemaError, Unresolvable):
        return None
    if error is None:
        return None
    where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return error.message, where


def _schema_mismatch(request: dict[str, Any], reply: dict[str, Any], calls: Calls) -> Fields | None:
    kind = _json_content(request, reply, calls)
    if kind != RESPONSE_FORMAT_JSON_SCHEMA:
        return None
    value, problem = _json_problem(kind, reply.get(REPLY_CONTENT))
    spec = request[PARAM_RESPONSE_FORMAT].get(RESPONSE_FORMAT_JSON_SCHEMA) or {}
    if problem is not None or spec.get("strict") is not True:
        return None
    if not isinstance(spec.get("schema"), dict):
        return None
    found = _schema_problem(spec["schema"], value)
    if found is None:
        return None
    return {"name": repr(spec["name"]), "problem": found[0], "where": found[1]}


# A verification rule (spec/chat/verification.yaml) -> the fields of its message when the
# reply breaks it, else None; checked in this order, the first broken rule refuses the reply.
# Codegen refuses a spec whose rules differ from these (registry.py).
RULES: dict[str, Callable[[dict[str, Any], dict[str, Any], Calls], Fields | None]] = {
    "unknown_function": _unknown_function,
    "duplicate_call_id": _duplicate_call_id,
    "tool_call_under_none": _tool_call_under_none,
    "missing_tool_call": _missing_tool_call,
    "other_function_called": _other_function_called,
    "content_not_json": _content_not_json,
    "schema_mismatch": _schema_mismatch,
}
implements("verification_rules", RULES)
CONTENT_RULES = ("content_not_json", "schema_mismatch")
"""The rules that hold the content to the requested JSON (not a visibly cut-off one)."""


def _single_tool_call(request: dict[str, Any], calls: Calls) -> Calls:
    """With parallel_tool_calls false, only the first call is kept."""
    return calls[:1] if request.get(PARAM_PARALLEL_TOOL_CALLS) is False else calls


# A reduction (spec/chat/verification.yaml) -> the tool calls the client receives; applied
# before the rules, in the modes the spec gives.
REDUCTIONS: dict[str, Callable[[dict[str, Any], Calls], Calls]] = {
    "single_tool_call": _single_tool_call,
}
implements("verification_reductions", REDUCTIONS)


def verify_chat_reply(
    request: dict[str, Any], reply: dict[str, Any], *, max_length: int | None = None
) -> dict[str, Any]:
    """The reply as the client will receive it, or ChatReplyRejected.

    ``request`` is the stored (validated) request with the client's values; ``reply`` the
    structured submit (content, reasoning_content, tool_calls, finish_reason, usage);
    ``max_length`` the output length the job was generated under (the row's max_length),
    by default the request's max_completion_tokens / max_tokens. The input is not modified.
    """
    mode = horde_option(request, HORDE_CONFORMANCE)
    length = max_length if max_length is not None else output_tokens(request)
    skipped = CONTENT_RULES if visibly_cut_off(reply, length) else ()
    calls: Calls = list(reply.get(REPLY_TOOL_CALLS) or [])
    out = dict(reply)
    for name, reduce in REDUCTIONS.items():
        if mode in VERIFICATION_REDUCTIONS[name]["modes"]:
            reduced = reduce(request, calls)
            if len(reduced) != len(calls):
                calls = reduced
                out[REPLY_TOOL_CALLS] = calls
    for name, rule in RULES.items():
        if mode not in VERIFICATION_RULES[name]["modes"] or name in skipped:
            continue
        fields = rule(request, reply, calls)
        if fields is not None:
            detail = VERIFICATION_RULES[name]["message"].format(**fields)
            raise ChatReplyRejected(rule=name, detail=detail)
    return out
