"""spec/chat/{pricing,verification,conversation}.yaml -> generated/chat/tables_reply.py.

The tables the reply-side engine reads (runtime/contract/: conversation, dispatch,
verification, pricing): the flattened prompt and context_fit, the fingerprint, the
verification rules and the price, with a Markdown reference in docs/verification.md. Which
rules, parts and modes the engine implements is checked in codegen/engine_check.py.
"""

from __future__ import annotations

import pprint
from typing import Any

from codegen.render import Output, render
from codegen.spec import Spec

PRICING_FILE = "chat/pricing.yaml"
VERIFICATION_FILE = "chat/verification.yaml"
CONVERSATION_FILE = "chat/conversation.yaml"
REPLY_FILES = (PRICING_FILE, VERIFICATION_FILE, CONVERSATION_FILE)


def _literal(value: Any) -> str:
    return pprint.pformat(value, width=96, sort_dicts=False)


def tables(spec: Spec) -> dict[str, Any]:
    """The reply-side tables as plain values (also what the docs template reads)."""
    pricing = spec[PRICING_FILE]
    verification = spec[VERIFICATION_FILE]
    conversation = spec[CONVERSATION_FILE]
    return {
        "charge_basis": pricing["charge_basis"],
        "chars_per_token": pricing["chars_per_token"],
        "floor_tokens": pricing["floor_tokens"],
        "counted": list(pricing["counted"]),
        "rules": {
            name: {"modes": tuple(r["modes"]), "message": r["message"]}
            for name, r in verification["rules"].items()
        },
        "reductions": {
            name: {"modes": tuple(r["modes"])} for name, r in verification["reductions"].items()
        },
        "content_exempt": tuple(verification["content_exempt_finish_reasons"]),
        "flatten": dict(conversation["flatten"]),
        "kept_roles": tuple(conversation["context_fit"]["kept_roles"]),
        "turn_role": conversation["context_fit"]["turn_starts_with"],
        "fingerprint": dict(conversation["fingerprint"]),
    }


def build(spec: Spec) -> list[Output]:
    raw = tables(spec)
    outputs = [
        render(
            "chat/tables_reply.py.j2",
            spec.sources(*REPLY_FILES),
            "chat/tables_reply.py",
            **{k: _literal(v) for k, v in raw.items()},
        )
    ]
    outputs.append(
        render(
            "docs_verification.md.j2",
            spec.sources(*REPLY_FILES),
            "docs/verification.md",
            pricing=spec[PRICING_FILE],
            verification=spec[VERIFICATION_FILE],
            conversation=spec[CONVERSATION_FILE],
        )
    )
    return outputs
