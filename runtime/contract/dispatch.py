"""What a popping worker receives, and the fingerprint that operation keys compare.

``chat_job_payload`` builds a job from the stored request for one worker's declaration:
messages as sent, sampling defaults filled, tools narrowed, max_tokens filled, reasoning only
for a worker declaring it; the stored request keeps the client's values.
``operation_fingerprint`` hashes the validated request's canonical JSON, set-valued keys
(models) as sets, so reordering them does not change it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from generated.chat.names import (
    DECL_CHAT_FEATURES,
    DECL_CHAT_LIMITS,
    LIMIT_MAX_CONTEXT_LENGTH,
    LIMIT_MAX_LENGTH,
    PARAM_MAX_TOKENS,
    PARAM_MESSAGES,
    PARAM_PARALLEL_TOOL_CALLS,
    PARAM_RESPONSE_FORMAT,
    PARAM_TOOL_CHOICE,
    PARAM_TOOLS,
)
from generated.chat.tables import PARAMETERS, PAYLOAD_FIT_MAX_TOKENS, REPLY_RESERVE_TOKENS
from generated.chat.tables_reply import FINGERPRINT
from runtime.contract.messages import messages_for_worker
from runtime.contract.requirements import prompt_measure
from runtime.contract.sampling import sampling_payload, tools_for_worker
from runtime.contract.validator import output_tokens

_MAX_TOKENS_KEY: str = PARAMETERS[PARAM_MAX_TOKENS]["payload_key"]


def chat_job_payload(
    request: dict[str, Any], declaration: dict[str, Any], *, max_tokens: int | None = None
) -> dict[str, Any]:
    """The chat job's payload for a worker with this (parsed) declaration.

    ``max_tokens`` overrides the output length (the lowered value when the native API
    lowered it at submission); otherwise the request's max_completion_tokens / max_tokens,
    else as much as fits (``fitted_output``), flagged for the worker to fit.

    Messages go as sent (developer as system); every sampling field with OpenAI's default
    where omitted; reasoning_effort (medium when omitted) only for a worker declaring
    reasoning; tools narrowed (tool_choice none sends none; a named function goes alone
    under required). Without max_tokens (spec/workers/limits.yaml, absent_max_tokens) the
    job's is the declared max_length, or the room the declared context leaves after the
    prompt measure when less (never under REPLY_RESERVE_TOKENS), with
    PAYLOAD_FIT_MAX_TOKENS: true, so the worker lowers it to its own count's room.
    """
    features = declaration.get(DECL_CHAT_FEATURES) or []
    payload: dict[str, Any] = {PARAM_MESSAGES: messages_for_worker(request[PARAM_MESSAGES])}
    payload.update(sampling_payload(request, list(features)))
    length = max_tokens if max_tokens is not None else output_tokens(request)
    if length is None:
        length = fitted_output(request, declaration)
        payload[PAYLOAD_FIT_MAX_TOKENS] = True
    payload[_MAX_TOKENS_KEY] = length
    tools, choice = tools_for_worker(request)
    if tools is not None:
        payload[PARAM_TOOLS] = tools
        payload[PARAM_TOOL_CHOICE] = choice
        if PARAM_PARALLEL_TOOL_CALLS in request:
            payload[PARAM_PARALLEL_TOOL_CALLS] = request[PARAM_PARALLEL_TOOL_CALLS]
    if PARAM_RESPONSE_FORMAT in request:
        payload[PARAM_RESPONSE_FORMAT] = request[PARAM_RESPONSE_FORMAT]
    return payload


def fitted_output(request: dict[str, Any], declaration: dict[str, Any]) -> int | None:
    """The output of a request without max_tokens on this worker: its declared max_length,
    or the room its declared context leaves after the prompt measure when that is less, but
    never under REPLY_RESERVE_TOKENS (routing reserved that much) nor over max_length."""
    limits = declaration.get(DECL_CHAT_LIMITS) or {}
    longest, context = limits.get(LIMIT_MAX_LENGTH), limits.get(LIMIT_MAX_CONTEXT_LENGTH)
    if context is None:
        return None if longest is None else int(longest)
    room = max(int(context) - prompt_measure(request), REPLY_RESERVE_TOKENS)
    return room if longest is None else min(int(longest), room)


def _as_set(values: list[Any]) -> list[str]:
    return sorted({json.dumps(v, sort_keys=True, ensure_ascii=False) for v in values})


def canonical_request(request: dict[str, Any]) -> str:
    """The text the fingerprint hashes: sorted keys, set-valued lists as sorted sets."""
    body = dict(request)
    for key in FINGERPRINT["set_valued"]:
        if isinstance(body.get(key), list):
            body[key] = _as_set(body[key])
    return json.dumps(
        {"fingerprint_version": FINGERPRINT["version"], "request": body},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )


def operation_fingerprint(request: dict[str, Any]) -> str:
    """A stable hex digest of the validated request, for operation keys."""
    text = canonical_request(request).encode("utf-8")
    return hashlib.new(FINGERPRINT["algorithm"], text).hexdigest()
