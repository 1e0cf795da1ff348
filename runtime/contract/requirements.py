"""What a chat request requires of a worker, and whether a worker's declaration covers it.

``required_chat_features(request)`` is computed once, when the request is created, and
stored on the row; eligibility then compares declarations with that list without loading
the messages. A field at its default counts as absent. Guarantees are required only under
strict; limits apply in both modes.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from generated.chat.names import (
    CONFORMANCE_BEST_EFFORT,
    CONFORMANCE_STRICT,
    DECL_CHAT_FEATURES,
    DECL_CHAT_LIMITS,
    HORDE_CONFORMANCE,
    LIMIT_MAX_CONTEXT_LENGTH,
    LIMIT_MAX_IMAGE_BYTES,
    LIMIT_MAX_IMAGES,
    LIMIT_MAX_LENGTH,
    LIMIT_MAX_TOOLS,
    LIMIT_TOOLS_MAX_TEMPERATURE,
    PARAM_MESSAGES,
    PARAM_RESPONSE_FORMAT,
    PARAM_TEMPERATURE,
    PARAM_TOOL_CHOICE,
    PARAM_TOOLS,
    RESPONSE_FORMAT_JSON_OBJECT,
    RESPONSE_FORMAT_JSON_SCHEMA,
    TOOL_CHOICE_NONE,
    TOOL_CHOICE_REQUIRED,
)
from generated.chat.tables import (
    CONTENT_PARTS,
    GUARANTEE_EXCEPTIONS,
    GUARANTEES,
    PARAMETERS,
    REPLY_RESERVE_TOKENS,
    ROLES,
)
from generated.errors import HordeError, NoWorkerSupportsFeatures, NoWorkerSupportsLimit
from runtime.contract.messages import estimated_tokens, image_parts, text_chars
from runtime.contract.registry import implements
from runtime.contract.validator import horde_option, output_tokens

# Conformance mode -> whether the request requires the guarantees of its fields.
GUARANTEES_REQUIRED: dict[str, bool] = {CONFORMANCE_STRICT: True, CONFORMANCE_BEST_EFFORT: False}
implements("conformance_modes", GUARANTEES_REQUIRED)


def is_strict(request: dict[str, Any]) -> bool:
    return GUARANTEES_REQUIRED[horde_option(request, HORDE_CONFORMANCE)]


def tools_sent(request: dict[str, Any]) -> bool:
    """Tool definitions reach the worker (tool_choice none sends none)."""
    return PARAM_TOOLS in request and request.get(PARAM_TOOL_CHOICE) != TOOL_CHOICE_NONE


def _format_type(request: dict[str, Any]) -> Any:
    return (request.get(PARAM_RESPONSE_FORMAT) or {}).get("type")


def _tool_choice_forced(_name: str, request: dict[str, Any]) -> bool:
    choice = request.get(PARAM_TOOL_CHOICE)
    return tools_sent(request) and (choice == TOOL_CHOICE_REQUIRED or isinstance(choice, dict))


def _tool_choice_required_among_several(_name: str, request: dict[str, Any]) -> bool:
    choice = request.get(PARAM_TOOL_CHOICE)
    return tools_sent(request) and choice == TOOL_CHOICE_REQUIRED and len(request[PARAM_TOOLS]) > 1


def _json_schema_strict(_name: str, request: dict[str, Any]) -> bool:
    if _format_type(request) != RESPONSE_FORMAT_JSON_SCHEMA:
        return False
    return request[PARAM_RESPONSE_FORMAT][RESPONSE_FORMAT_JSON_SCHEMA].get("strict") is True


# A requirement's ``when`` (spec/chat/parameters.yaml) -> whether it holds for the parameter
# ``name`` of a normalised request. Codegen refuses a ``when`` missing here (registry.py).
CONDITIONS: dict[str, Callable[[str, dict[str, Any]], bool]] = {
    "always": lambda _name, _request: True,
    "present": lambda name, request: name in request,
    "tools_sent": lambda _name, request: tools_sent(request),
    "tool_choice_forced": _tool_choice_forced,
    "tool_choice_required_among_several": _tool_choice_required_among_several,
    "json_object": lambda _n, request: _format_type(request) == RESPONSE_FORMAT_JSON_OBJECT,
    "json_schema": lambda _n, request: _format_type(request) == RESPONSE_FORMAT_JSON_SCHEMA,
    "json_output": lambda _n, request: (
        _format_type(request) in (RESPONSE_FORMAT_JSON_OBJECT, RESPONSE_FORMAT_JSON_SCHEMA)
    ),
    "json_schema_strict": _json_schema_strict,
}
implements("when_conditions", CONDITIONS)


def _message_features(messages: list[dict[str, Any]]) -> set[str]:
    needed: set[str] = set()
    for m in messages:
        rules = ROLES[m["role"]]
        needed.update(rules["requires"])
        needed.update(f for key, f in rules["requires_when_key"].items() if m.get(key))
        if isinstance(m.get("content"), list):
            for part in m["content"]:
                needed.update(CONTENT_PARTS[part["type"]]["requires"])
    return needed


def required_chat_features(request: dict[str, Any]) -> list[str]:
    """Features, plus guarantees under strict, a normalised request requires (sorted)."""
    strict = is_strict(request)
    needed = _message_features(request[PARAM_MESSAGES])
    for name, spec in PARAMETERS.items():
        for kind, required, when in spec["requires"]:
            if (kind == "feature" or strict) and CONDITIONS[when](name, request):
                needed.add(required)
    return sorted(needed)


def _image_bytes(url: str) -> int:
    if not url.startswith("data:") or "," not in url:
        return 0
    data = url.split(",", 1)[1]
    try:
        return len(base64.b64decode(data, validate=False))
    except ValueError:
        return math.ceil(len(data) * 3 / 4)


def prompt_measure(request: dict[str, Any]) -> int:
    """The estimated tokens of what the worker renders: the messages' text and, when they are
    sent, the tool definitions (chars_per_token_estimate, no tokenizer)."""
    chars = text_chars(request[PARAM_MESSAGES])
    if tools_sent(request):
        chars += sum(len(str(t["function"])) for t in request[PARAM_TOOLS])
    return estimated_tokens(chars)


def reserved_output(request: dict[str, Any]) -> int:
    """The output the context measure reserves: max_completion_tokens / max_tokens, or, when
    absent (as much as fits), REPLY_RESERVE_TOKENS (spec/workers/limits.yaml)."""
    output = output_tokens(request)
    return REPLY_RESERVE_TOKENS if output is None else output


def required_chat_limits(request: dict[str, Any]) -> dict[str, int | float]:
    """Limit name -> the request's measure of it (a limit the request does not touch is absent).

    max_context_length is the prompt measure plus the reserved output (the reply reserve
    when max_tokens is absent). Image sizes are known here only for inline (data:) images;
    the native API adds the sizes of fetched images after it fetches them.
    """
    out: dict[str, int | float] = {}
    output = output_tokens(request)
    if output is not None:
        out[LIMIT_MAX_LENGTH] = output
    if tools_sent(request):
        tools = request[PARAM_TOOLS]
        forced_one = isinstance(request.get(PARAM_TOOL_CHOICE), dict)
        out[LIMIT_MAX_TOOLS] = 1 if forced_one else len(tools)
        default_temperature = PARAMETERS[PARAM_TEMPERATURE]["default"]
        out[LIMIT_TOOLS_MAX_TEMPERATURE] = request.get(PARAM_TEMPERATURE, default_temperature)
    out[LIMIT_MAX_CONTEXT_LENGTH] = prompt_measure(request) + reserved_output(request)
    images = image_parts(request[PARAM_MESSAGES])
    if images:
        out[LIMIT_MAX_IMAGES] = len(images)
        sizes = [_image_bytes(p["image_url"]["url"]) for p in images]
        if max(sizes):
            out[LIMIT_MAX_IMAGE_BYTES] = max(sizes)
    return out


@dataclass(frozen=True)
class Gap:
    """Why a declaration does not cover a request: missing names, or one limit exceeded."""

    kind: str  # "features" (404 no_worker_supports_features) or "limit" (400)
    missing: tuple[str, ...] = ()
    limit: str | None = None
    value: float | None = None
    maximum: float | None = None

    def error(self) -> HordeError:
        if self.kind == "features":
            return features_gap(self.missing)
        return NoWorkerSupportsLimit(
            limit=self.limit, value=self.value, maximum=self.maximum, param=self.limit
        )


def features_gap(
    missing: Collection[str], metadata: dict[str, Any] | None = None
) -> NoWorkerSupportsFeatures:
    """404 no_worker_supports_features naming what is missing and, when a guarantee is among
    it, the opt-in: a best_effort request does not require guarantees (docs/design.md,
    "Features and guarantees"), the features themselves still apply."""
    guarantees = [name for name in missing if name in GUARANTEES]
    opt_in = (
        f" {', '.join(guarantees)} {'is a guarantee' if len(guarantees) == 1 else 'are guarantees'}"
        f" that strict requests (the default) require; send horde.{HORDE_CONFORMANCE}:"
        f' {CONFORMANCE_BEST_EFFORT} (OpenAI SDK: extra_body={{"horde":'
        f' {{"{HORDE_CONFORMANCE}": "{CONFORMANCE_BEST_EFFORT}"}}}}) to accept a worker'
        " that supports the feature without guaranteeing it."
        if guarantees
        else ""
    )
    return NoWorkerSupportsFeatures(missing=", ".join(missing), opt_in=opt_in, metadata=metadata)


def scope_exclusions(declared: Collection[str]) -> list[tuple[str, str]]:
    """(guarantee, feature) pairs the declared scopes exclude: the guarantee does not cover
    a request that requires the feature (the SQL form of eligibility uses these)."""
    return [pair for scope, pair in GUARANTEE_EXCEPTIONS.items() if scope in declared]


def covered_names(declared: Collection[str], required: Collection[str]) -> set[str]:
    """The names a declaration covers for a request requiring ``required``: every declared
    name, less a guarantee whose declared scope (GUARANTEE_EXCEPTIONS, e.g.
    prompt_overflow_refused_except_tools) leaves out a feature the request requires."""
    covered = set(declared)
    for guarantee, feature in scope_exclusions(declared):
        if feature in required:
            covered.discard(guarantee)
    return covered


def declaration_covers(
    declaration: dict[str, Any], required: list[str], limits: dict[str, int | float]
) -> Gap | None:
    """None when a parsed declaration covers the stored requirements, else the gap."""
    declared = covered_names(declaration.get(DECL_CHAT_FEATURES, ()), required)
    missing = tuple(name for name in required if name not in declared)
    if missing:
        return Gap(kind="features", missing=missing)
    bounds = declaration.get(DECL_CHAT_LIMITS, {})
    for name, value in limits.items():
        bound = bounds.get(name)
        if bound is not None and value > bound:
            return Gap(kind="limit", limit=name, value=value, maximum=bound)
    return None


def pool_gap(
    declarations: list[dict[str, Any]], required: list[str], limits: dict[str, int | float]
) -> Gap | None:
    """The pool's gap: None if any declaration covers; a limit gap outranks a feature gap.

    When a worker declares every required feature and only a limit stops it, the gap is that
    limit (400: the client can shrink the request), with the largest value any such worker
    declares for it; only when no worker declares the features is it a feature gap (404),
    naming what is missing from the declaration that lacks fewest.
    """
    gaps = [declaration_covers(d, required, limits) for d in declarations]
    if not gaps or any(g is None for g in gaps):
        return None
    limit_gaps = [g for g in gaps if g is not None and g.kind == "limit"]
    if limit_gaps:
        first = limit_gaps[0]
        largest = max(
            g.maximum for g in limit_gaps if g.limit == first.limit and g.maximum is not None
        )
        return Gap(kind="limit", limit=first.limit, value=first.value, maximum=largest)
    return min((g for g in gaps if g is not None), key=lambda g: len(g.missing))
