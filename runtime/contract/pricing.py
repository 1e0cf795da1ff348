"""Pricing by the text output estimate, and the generation's text form.

``output_estimate(reply, max_length)`` is the one place a chat generation's charged tokens
are computed: the characters of the counted parts of the reply (content, reasoning, each
tool call's name and arguments) divided by PRICING_CHARS_PER_TOKEN and rounded up, at
least PRICING_FLOOR_TOKENS, at most the requested max_length. Worker-reported token counts
never enter it. Each generation stores CHARGE_BASIS (generated.chat.tables_reply) as its
charge_basis.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from generated.chat.names import REPLY_CONTENT, REPLY_REASONING_CONTENT, REPLY_TOOL_CALLS
from generated.chat.tables_reply import (
    FLATTEN,
    PRICING_CHARS_PER_TOKEN,
    PRICING_COUNTED,
    PRICING_FLOOR_TOKENS,
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
    """Charged tokens of a structured chat reply (floor and cap applied)."""
    tokens = max(math.ceil(counted_chars(reply) / PRICING_CHARS_PER_TOKEN), PRICING_FLOOR_TOKENS)
    return min(tokens, max_length)


def reply_text(reply: dict[str, Any]) -> str:
    """The text column of a chat generation: the content, then each tool call.

    Reasoning is kept apart (its own column), as the client receives it apart.
    """
    pieces: list[str] = [reply[REPLY_CONTENT]] if reply.get(REPLY_CONTENT) else []
    pieces.extend(tool_call_text(call) for call in _calls(reply))
    return FLATTEN["part_separator"].join(pieces)
