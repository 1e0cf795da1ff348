"""The chat contract's tables, read once from spec/ for the chat targets and chat_schema.

Every generated chat module inlines these tables; nothing here is chat logic, only the
reshaping of spec/chat/*.yaml and spec/workers/*.yaml into plain dicts and lists.
"""

from __future__ import annotations

from typing import Any

from codegen.spec import Spec

PARAMETERS_FILE = "chat/parameters.yaml"
MESSAGES_FILE = "chat/messages.yaml"
HORDE_FILE = "chat/horde.yaml"
FEATURES_FILE = "workers/features.yaml"
LIMITS_FILE = "workers/limits.yaml"
DECLARATION_FILE = "workers/declaration.yaml"
REPLY_FILE = "chat/reply.yaml"
ALL_FILES = (
    PARAMETERS_FILE,
    MESSAGES_FILE,
    HORDE_FILE,
    FEATURES_FILE,
    LIMITS_FILE,
    DECLARATION_FILE,
)


def parameters(spec: Spec) -> dict[str, dict[str, Any]]:
    """Each parameter: schema, default (if any), noop values, treatment, requirements."""
    out: dict[str, dict[str, Any]] = {}
    for name, p in spec[PARAMETERS_FILE]["parameters"].items():
        has_default = "default" in p
        noop = ([p["default"]] if has_default else []) + list(p.get("noop_values", []))
        out[name] = {
            "treatment": p["treatment"],
            "schema": p["schema"],
            "has_default": has_default,
            "default": p.get("default"),
            "noop_values": noop,
            "reason": p.get("reason"),
            "sampling": p.get("sampling", False),
            "payload_key": p.get("payload_key", name),
            "requires": [
                (
                    "feature" if "feature" in r else "guarantee",
                    r.get("feature") or r["guarantee"],
                    r["when"],
                )
                for r in p.get("requires", [])
            ],
        }
    return out


def sampling_defaults(spec: Spec) -> dict[str, Any]:
    """Payload key -> OpenAI's default (None where OpenAI documents none)."""
    out: dict[str, Any] = {}
    for p in parameters(spec).values():
        if p["sampling"]:
            out.setdefault(p["payload_key"], p["default"])
    return out


def front_default_drops(spec: Spec) -> dict[str, list[Any]]:
    """The front's default no-op table: key -> the values it drops the key at."""
    return {
        name: p["noop_values"]
        for name, p in parameters(spec).items()
        if p["treatment"] == "dropped_at_default"
    }


def horde_keys(spec: Spec) -> dict[str, dict[str, Any]]:
    return {
        k: {"schema": v["schema"], "default": v["default"]}
        for k, v in spec[HORDE_FILE]["keys"].items()
    }


def messages(spec: Spec) -> dict[str, Any]:
    m = spec[MESSAGES_FILE]
    roles = {
        role: {
            "content": r["content"],
            "keys": r["keys"],
            "required_keys": r.get("required_keys", []),
            "refused_keys": r.get("refused_keys", {}),
            "sent_as": r.get("sent_as", role),
            "requires": r.get("requires", []),
            "requires_when_key": r.get("requires_when_key", {}),
        }
        for role, r in m["roles"].items()
    }
    parts = {
        t: {"keys": p["keys"], "requires": p.get("requires", [])}
        for t, p in m["content_parts"].items()
    }
    return {
        "roles": roles,
        "refused_roles": m["refused_roles"],
        "parts": parts,
        "refused_parts": m["refused_parts"],
        "tool_function_keys": m["tool_definition"]["function_keys"],
        "tool_choice_function_keys": m["tool_choice"]["function_keys"],
        "response_format_types": m["response_format"]["types"],
    }


def features(spec: Spec) -> list[str]:
    return list(spec[FEATURES_FILE]["features"])


def guarantees(spec: Spec) -> list[str]:
    return list(spec[FEATURES_FILE]["guarantees"])


def guarantee_scopes(spec: Spec) -> list[str]:
    return list(spec[FEATURES_FILE].get("guarantee_scopes") or {})


def guarantee_exceptions(spec: Spec) -> dict[str, tuple[str, str]]:
    """Scope name -> (the guarantee it narrows, the feature whose requests it leaves out)."""
    return {
        name: (entry["narrows"], entry["except_with"])
        for name, entry in (spec[FEATURES_FILE].get("guarantee_scopes") or {}).items()
    }


def limits(spec: Spec) -> dict[str, dict[str, Any]]:
    return {
        name: {
            "type": lim["type"],
            "minimum": lim["minimum"],
            "when_absent": lim["when_absent"],
            "pop_fallback": lim.get("pop_fallback"),
        }
        for name, lim in spec[LIMITS_FILE]["limits"].items()
    }


def chars_per_token(spec: Spec) -> int:
    return int(spec[LIMITS_FILE]["chars_per_token_estimate"])


def reply_reserve_tokens(spec: Spec) -> int:
    return int(spec[LIMITS_FILE]["absent_max_tokens"]["reply_reserve_tokens"])


def fit_flag(spec: Spec) -> str:
    return str(spec[LIMITS_FILE]["absent_max_tokens"]["fit_flag"])


def declaration(spec: Spec) -> dict[str, dict[str, Any]]:
    return {
        key: {
            "schema": d["schema"],
            "has_default": "default" in d,
            "default": d.get("default"),
            "required_with": d.get("required_with"),
            "names": d.get("names", []),
        }
        for key, d in spec[DECLARATION_FILE]["declaration"].items()
    }


def reply_keys(spec: Spec) -> list[str]:
    return list(spec[REPLY_FILE]["keys"])


def finish_reasons(spec: Spec) -> list[str]:
    return list(spec[REPLY_FILE]["finish_reasons"])


def _string_enum(schema: Any) -> list[str]:
    """The string values of a schema's enum, also inside anyOf."""
    if not isinstance(schema, dict):
        return []
    values = [v for v in schema.get("enum", []) if isinstance(v, str)]
    for sub in schema.get("anyOf", []):
        values += _string_enum(sub)
    return values


def enum_values(spec: Spec) -> list[tuple[str, str]]:
    """(constant, value) for each string enum value of a parameter or a horde key:
    ``TOOL_CHOICE_AUTO = 'auto'``, ``CONFORMANCE_STRICT = 'strict'``."""
    keyed = [
        *((n, p["schema"]) for n, p in spec[PARAMETERS_FILE]["parameters"].items()),
        *((k, v["schema"]) for k, v in spec[HORDE_FILE]["keys"].items()),
    ]
    out = [
        (f"{key}_{value}".upper().replace("-", "_"), value)
        for key, schema in keyed
        for value in _string_enum(schema)
    ]
    consts = [c for c, _ in out]
    clashes = sorted({c for c in consts if consts.count(c) > 1 or not c.isidentifier()})
    if clashes:
        raise ValueError(f"enum value constants clash or are not identifiers: {clashes}")
    return out
