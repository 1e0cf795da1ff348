"""spec/chat/{pricing,verification,conversation}.yaml -> generated/chat/ reply-side modules.

The functions the native API calls around a chat job: the flattened prompt column and
context_fit (conversation.py), the job payload and the operation fingerprint (dispatch.py),
reply verification (verification.py) and the output-estimate price (pricing.py), with their
tables in tables_reply.py and a Markdown reference in docs/verification.md.
"""

from __future__ import annotations

import pprint
from typing import Any

from codegen import chat_tables
from codegen.errors import SpecError, SpecErrors
from codegen.render import Output, render
from codegen.spec import Spec

PRICING_FILE = "chat/pricing.yaml"
VERIFICATION_FILE = "chat/verification.yaml"
CONVERSATION_FILE = "chat/conversation.yaml"
REPLY_FILES = (PRICING_FILE, VERIFICATION_FILE, CONVERSATION_FILE)

LOGIC_MODULES = ("conversation", "dispatch", "verification", "pricing")
# Content part types conversation.py.j2 knows how to flatten.
FLATTENED_PARTS = ("text", "image_url", "refusal")


def check_flattened_parts(spec: Spec) -> None:
    """Refuse a content part type flatten_messages has no rendering for."""
    parts = spec[chat_tables.MESSAGES_FILE]["content_parts"]
    unknown = [p for p in parts if p not in FLATTENED_PARTS]
    if unknown:
        raise SpecErrors(
            [
                SpecError(
                    f"spec/{chat_tables.MESSAGES_FILE}",
                    f"content_parts.{unknown[0]}",
                    "flatten_messages has no rendering for this part type",
                    "add one to _PARTS in codegen/templates/chat/conversation.py.j2 and to "
                    "FLATTENED_PARTS in codegen/targets/chat_reply.py",
                )
            ]
        )


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
    check_flattened_parts(spec)
    sources = spec.sources(*REPLY_FILES, *chat_tables.ALL_FILES)
    raw = tables(spec)
    outputs = [
        render(
            "chat/tables_reply.py.j2",
            spec.sources(*REPLY_FILES),
            "chat/tables_reply.py",
            **{k: _literal(v) for k, v in raw.items()},
        )
    ]
    outputs += [render(f"chat/{name}.py.j2", sources, f"chat/{name}.py") for name in LOGIC_MODULES]
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
