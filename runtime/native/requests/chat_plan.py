"""A chat request's plan against the online pool, computed once at submission.

From the validated request and the online declarations serving its models: max_tokens over
every declared length is lowered to the largest (``max_tokens_lowered_to``; the row keeps
the client's value); under context_fit truncate_oldest a conversation too long for every
context loses its oldest whole turns; the requirements are computed once for the row, and a
pool gap is refused (404 features or guarantees, 400 a size limit). Kept messages are as
stored: a developer message as system (docs/design.md, "Sampling defaults").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from generated.chat.names import (
    DECL_CHAT_LIMITS,
    HORDE_CONTEXT_FIT,
    LIMIT_MAX_CONTEXT_LENGTH,
    LIMIT_MAX_LENGTH,
    PARAM_MAX_COMPLETION_TOKENS,
    PARAM_MAX_TOKENS,
    PARAM_MESSAGES,
)
from runtime.contract.conversation import CONTEXT_FIT, Fit
from runtime.contract.messages import estimated_tokens, messages_for_worker, text_chars
from runtime.contract.requirements import pool_gap, required_chat_features, required_chat_limits
from runtime.contract.validator import horde_option, output_tokens
from runtime.tables.route_schemas import DEFS

_TEXT_PARAMS = DEFS["native"]["TextParams"]["properties"]
TEXT_DEFAULT_MAX_LENGTH: int = _TEXT_PARAMS["max_length"]["default"]
TEXT_DEFAULT_CONTEXT: int = _TEXT_PARAMS["max_context_length"]["default"]
"""A chat request is priced as the same text request: at least the text default context."""


@dataclass(frozen=True)
class ChatPlan:
    messages: list[dict[str, Any]]
    required_features: list[str]
    required_limits: dict[str, int | float]
    max_length: int
    max_context_length: int
    max_tokens_lowered_to: int | None


def largest_declared(declarations: list[dict[str, Any]], limit: str) -> int | float | None:
    """The largest declared bound of ``limit``; None when some worker leaves it unbounded."""
    bounds = [(d.get(DECL_CHAT_LIMITS) or {}).get(limit) for d in declarations]
    declared: list[int | float] = [b for b in bounds if b is not None]
    if not bounds or len(declared) < len(bounds):
        return None
    return max(declared)


def _lower_output(request: dict[str, Any], to: int) -> dict[str, Any]:
    work = dict(request)
    for key in (PARAM_MAX_COMPLETION_TOKENS, PARAM_MAX_TOKENS):
        if key in work:
            work[key] = to
    return work


def _fitted(work: dict[str, Any], declarations: list[dict[str, Any]], fit: Fit) -> dict[str, Any]:
    largest = largest_declared(declarations, LIMIT_MAX_CONTEXT_LENGTH)
    needed = required_chat_limits(work)[LIMIT_MAX_CONTEXT_LENGTH]
    if largest is None or needed <= largest:
        return work
    messages = work[PARAM_MESSAGES]
    reserved = needed - estimated_tokens(text_chars(messages))
    kept = fit(messages, int(largest), reserved_tokens=max(0, int(reserved)))
    return {**work, PARAM_MESSAGES: kept}


def plan_chat_request(
    request: dict[str, Any],
    declarations: list[dict[str, Any]],
    measured: dict[str, int] | None = None,
) -> ChatPlan:
    """The plan, or the pool gap's error (``Gap.error()``).

    ``measured``: limit measures only the native API knows (the stored images' count and
    largest size, from image intake); they replace the request's own before the gap check.
    """
    work = dict(request)
    lowered: int | None = None
    wanted = output_tokens(request)
    largest_length = largest_declared(declarations, LIMIT_MAX_LENGTH)
    if wanted is not None and largest_length is not None and wanted > largest_length:
        lowered = int(largest_length)
        work = _lower_output(work, lowered)
    fit = CONTEXT_FIT[horde_option(request, HORDE_CONTEXT_FIT)]
    if fit is not None:
        work = _fitted(work, declarations, fit)
    required = required_chat_features(work)
    limits = {**required_chat_limits(work), **(measured or {})}
    gap = pool_gap(declarations, required, limits)
    if gap is not None:
        raise gap.error()
    length = output_tokens(work) or largest_length or TEXT_DEFAULT_MAX_LENGTH
    return ChatPlan(
        messages=messages_for_worker(work[PARAM_MESSAGES]),
        required_features=required,
        required_limits=limits,
        max_length=int(length),
        max_context_length=max(int(limits[LIMIT_MAX_CONTEXT_LENGTH]), TEXT_DEFAULT_CONTEXT),
        max_tokens_lowered_to=lowered,
    )
