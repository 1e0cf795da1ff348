"""What the chat contract engine implements, by the names the spec uses for it.

The spec names conditions, rules and modes by string and the engine dispatches on them.
``ENGINE`` lists, per kind, every name the engine has code for; codegen refuses a spec
naming one not listed (codegen/engine_check.py), so it fails ``make check-generated``
instead of a KeyError at run time, and each engine module checks at import (``implements``)
that its table matches. To add a name: the function, its key in the module's table, the name
here. Imports nothing from generated/: codegen reads it before generated/ is current.
"""

from __future__ import annotations

from collections.abc import Iterable

ENGINE: dict[str, tuple[str, ...]] = {
    # requires[].when of spec/chat/parameters.yaml: runtime.contract.requirements.CONDITIONS
    "when_conditions": (
        "always",
        "present",
        "tools_sent",
        "tool_choice_forced",
        "tool_choice_required_among_several",
        "json_object",
        "json_schema",
        "json_output",
        "json_schema_strict",
    ),
    # treatment of spec/chat/parameters.yaml: runtime.contract.validator.TREATMENTS
    "treatments": (
        "supported",
        "capability",
        "refused_unless_default",
        "dropped_at_default",
        "refused",
    ),
    # the horde key conformance and the modes of spec/chat/verification.yaml:
    # runtime.contract.requirements.GUARANTEES_REQUIRED
    "conformance_modes": ("strict", "best_effort"),
    # the horde key context_fit: runtime.contract.conversation.CONTEXT_FIT
    "context_fit_modes": ("refuse", "truncate_oldest"),
    # rules of spec/chat/verification.yaml: runtime.contract.verification.RULES
    "verification_rules": (
        "tool_call_under_none",
        "missing_tool_call",
        "other_function_called",
        "content_not_json",
        "schema_mismatch",
        "unknown_function",
        "duplicate_call_id",
    ),
    # reductions of spec/chat/verification.yaml: runtime.contract.verification.REDUCTIONS
    "verification_reductions": ("single_tool_call",),
    # counted of spec/chat/pricing.yaml: runtime.contract.pricing.MEASURES
    "pricing_counted": ("content", "reasoning_content", "tool_call_name", "tool_call_arguments"),
    # content_parts of spec/chat/messages.yaml: runtime.contract.conversation.PARTS
    "flattened_parts": ("text", "image_url", "refusal"),
    # translation of spec/responses/parameters.yaml:
    # runtime.front.responses_api.request.TRANSLATIONS
    "responses_translations": (
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "text_format",
        "truncation",
        "no_effect",
    ),
    # items.*.translation of spec/responses/input.yaml:
    # runtime.front.responses_api.items.ITEMS_RULES
    "responses_items": ("message", "function_call", "function_call_output", "dropped"),
    # content_parts.*.becomes of spec/responses/input.yaml:
    # runtime.front.responses_api.items.PARTS_RULES
    "responses_parts": ("text", "refusal", "image_url"),
}


def implements(kind: str, table: Iterable[str]) -> None:
    """Refuse (at import) an engine dispatch table that is not exactly the registry's kind."""
    have, want = set(table), set(ENGINE[kind])
    if have != want:
        raise RuntimeError(
            f"runtime.contract: the {kind} the engine dispatches on differ from "
            f"runtime/contract/registry.py: missing {sorted(want - have)}, "
            f"unlisted {sorted(have - want)}"
        )
