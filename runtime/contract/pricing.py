"""Pricing: the text output estimate, the generation's text form, and the kudos formula.

``output_estimate`` is the one place a chat generation's charged tokens are computed, from
the reply's characters; worker-reported counts never enter it (docs/design.md, "Pricing").
The kudos formula is upstream AI Horde's (numbers in spec/pricing.yaml): ``job_quote``
prices one job at its full max_length, ``job_reward`` what a worker earns for one
generation. A model's size comes from the text model reference only (``model_billions``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from generated.chat.names import REPLY_CONTENT, REPLY_REASONING_CONTENT, REPLY_TOOL_CALLS
from generated.chat.tables_reply import (
    FLATTEN,
    PRICING_CHARS_PER_TOKEN,
    PRICING_COUNTED,
    PRICING_FLOOR_TOKENS,
)
from generated.pricing import (
    BONUS_EXPONENT,
    BONUS_FLOOR_BILLIONS,
    CONTEXT_BASE,
    CONTEXT_GROWTH,
    CONTEXT_MAX,
    CONTEXT_MIN,
    CONTEXT_OFFSET,
    PER_JOB_REWARD_CAP,
    QUANTISATION_SUFFIX,
    QUOTE_DIVISOR,
    QUOTE_NO_MODEL_BILLIONS,
    QUOTE_UNKNOWN_MODEL_BILLIONS,
    REWARD_CONTEXT,
    REWARD_DIVISOR,
    TEXT_MODELS,
    UNKNOWN_TRUSTED_BILLIONS,
    UNKNOWN_TRUSTED_DIVISOR,
    UNTRUSTED_BILLION_TOKENS_PER_SECOND,
    UNVALIDATED_BACKEND_SHARE,
    USER_SEPARATOR,
    VALIDATED_BACKENDS,
)
from runtime.contract.conversation import tool_call_text
from runtime.contract.registry import implements


def _calls(reply: dict[str, Any]) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = reply.get(REPLY_TOOL_CALLS) or []
    return calls


# A counted part of the reply (spec/chat/pricing.yaml) -> its characters. Codegen refuses a
# part missing here (registry.py).
MEASURES: dict[str, Callable[[dict[str, Any]], int]] = {
    "content": lambda r: len(r.get(REPLY_CONTENT) or ""),
    "reasoning_content": lambda r: len(r.get(REPLY_REASONING_CONTENT) or ""),
    "tool_call_name": lambda r: sum(len(c["function"]["name"]) for c in _calls(r)),
    "tool_call_arguments": lambda r: sum(len(c["function"]["arguments"]) for c in _calls(r)),
}
implements("pricing_counted", MEASURES)


def counted_chars(reply: dict[str, Any]) -> int:
    """The characters the charge counts."""
    return sum(MEASURES[part](reply) for part in PRICING_COUNTED)


def output_estimate(reply: dict[str, Any], max_length: int) -> int:
    """Charged tokens of a structured chat reply: the characters of content, reasoning and
    each tool call's name and arguments over PRICING_CHARS_PER_TOKEN, rounded up, at least
    PRICING_FLOOR_TOKENS, at most ``max_length``. Stored with CHARGE_BASIS."""
    tokens = max(math.ceil(counted_chars(reply) / PRICING_CHARS_PER_TOKEN), PRICING_FLOOR_TOKENS)
    return min(tokens, max_length)


def reply_text(reply: dict[str, Any]) -> str:
    """The text column of a chat generation: the content, then each tool call.

    Reasoning is kept apart (its own column), as the client receives it apart.
    """
    pieces: list[str] = [reply[REPLY_CONTENT]] if reply.get(REPLY_CONTENT) else []
    pieces.extend(tool_call_text(call) for call in _calls(reply))
    return FLATTEN["part_separator"].join(pieces)


# Kudos: upstream's text formula on spec/pricing.yaml's numbers (generated.pricing). These
# are the only functions that price anything: the quote of a text or chat request and the
# reward of every generation (submit, streamed settlement) go through them.


def context_multiplier(context: float) -> float:
    """OFFSET + GROWTH ** log2(context / BASE), clamped (upstream: 2048 -> 3.4)."""
    value = CONTEXT_OFFSET + float(CONTEXT_GROWTH ** math.log2(max(context, 1) / CONTEXT_BASE))
    return min(float(CONTEXT_MAX), max(float(CONTEXT_MIN), value))


def parameter_bonus(billions: float) -> float:
    return float((max(billions, BONUS_FLOOR_BILLIONS) / BONUS_FLOOR_BILLIONS) ** BONUS_EXPONENT)


_NO_Q = re.compile(QUANTISATION_SUFFIX)


def reference_name(model: str) -> str | None:
    """The model reference's name for a served model name, or None when it is unknown.

    As upstream: the name as is, else the part before USER_SEPARATOR ("model::user"), else
    that without its quantisation suffix. A size is never read from the name itself.
    """
    parts = model.split(USER_SEPARATOR)
    name = parts[0] if len(parts) == 2 else model
    if name in TEXT_MODELS:
        return name
    stripped = _NO_Q.sub("", name)
    return stripped if stripped in TEXT_MODELS else None


def model_billions(model: str) -> float | None:
    """A known model's size in billions of parameters (None: not in the reference)."""
    name = reference_name(model)
    return None if name is None else float(TEXT_MODELS[name])


def is_validated_backend(bridge_agent: str) -> bool:
    """Whether a worker's bridge agent ("name:version:url") names a validated backend."""
    parts = bridge_agent.split(":", 2)
    return len(parts) == 3 and parts[0] in VALIDATED_BACKENDS


def token_count(text: str, max_length: int) -> int:
    """Upstream's quick count: characters / chars_per_token rounded up, floor, max_length cap."""
    tokens = max(math.ceil(len(text) / PRICING_CHARS_PER_TOKEN), PRICING_FLOOR_TOKENS)
    return min(tokens, max_length)


def reward_context(prompt: str, max_length: int, max_context_length: int) -> int:
    """The context the reward's multiplier measures (spec/pricing.yaml reward.context)."""
    if REWARD_CONTEXT == "prompt_tokens":
        return token_count(prompt, max_length)
    return max_context_length


def job_reward(
    tokens: int,
    model: str,
    context: int,
    *,
    trusted: bool,
    validated: bool,
    billions_cap: float | None = None,
) -> float:
    """What a worker earns for one generation of ``tokens`` (upstream's get_gen_kudos). An
    unknown model earns an untrusted worker the context multiplier alone; a backend whose
    bridge agent is not validated earns a share of a known model's reward. ``billions_cap``:
    a known model is paid as at most this size (``speed_billions``)."""
    multiplier = context_multiplier(context)
    billions = model_billions(model)
    if billions is not None and billions_cap is not None:
        billions = min(billions, billions_cap)
    if billions is None:
        if not trusted:
            reward = multiplier
        else:
            reward = tokens * multiplier * UNKNOWN_TRUSTED_BILLIONS / UNKNOWN_TRUSTED_DIVISOR
    else:
        kudos = tokens * parameter_bonus(billions) * billions / REWARD_DIVISOR
        if not validated:
            kudos *= UNVALIDATED_BACKEND_SHARE
        reward = kudos * multiplier
    return min(reward, float(PER_JOB_REWARD_CAP))


def speed_billions(tokens: int, seconds: float) -> float | None:
    """The largest model an untrusted worker is paid as for ``tokens`` in ``seconds``
    (spec/pricing.yaml economy.untrusted_speed; None: no bound, no time measured)."""
    if seconds <= 0:
        return 0.0 if tokens > 0 else None
    return float(UNTRUSTED_BILLION_TOKENS_PER_SECOND) * seconds / max(tokens, 1)


def _model_quote(max_length: int, multiplier: float, model: str | None) -> float:
    if model is None:
        billions: float = QUOTE_NO_MODEL_BILLIONS
    else:
        known = model_billions(model)
        if known is None:
            return max_length * QUOTE_UNKNOWN_MODEL_BILLIONS / QUOTE_DIVISOR * multiplier
        billions = known
    return max_length * parameter_bonus(billions) * billions * multiplier / QUOTE_DIVISOR


def job_quote(max_length: int, max_context_length: int, models: list[str]) -> float:
    """One job's quote at its full max_length (upstream's calculate_kudos); several models:
    the dearest (QUOTE_SEVERAL_MODELS)."""
    multiplier = context_multiplier(max_context_length)
    if not models:
        return _model_quote(max_length, multiplier, None)
    return max(_model_quote(max_length, multiplier, m) for m in models)
