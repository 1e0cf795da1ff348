"""spec/chat/ + spec/workers/ -> generated/docs/{parameters,messages,features,limits}.md."""

from __future__ import annotations

import json
from typing import Any

from codegen import chat_tables
from codegen.render import Output, render
from codegen.spec import Spec


def schema_words(schema: dict[str, Any]) -> str:
    """A short reading of a parameter's JSON Schema: types, bounds, enums."""
    if "anyOf" in schema:
        return " or ".join(schema_words(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    types = schema.get("type", "any")
    words = " or ".join(types) if isinstance(types, list) else types
    bounds = [
        f"{label} {schema[key]}"
        for key, label in (
            ("minimum", ">="),
            ("maximum", "<="),
            ("minItems", "items >="),
            ("maxItems", "items <="),
            ("minLength", "length >="),
            ("maxLength", "length <="),
        )
        if key in schema
    ]
    return words + (f" ({', '.join(bounds)})" if bounds else "")


def _requires(p: dict[str, Any]) -> str:
    return "; ".join(
        f"{'feature' if 'feature' in r else 'guarantee'} `{r.get('feature') or r['guarantee']}`"
        f" when {r['when'].replace('_', ' ')}"
        for r in p.get("requires", [])
    )


def value_words(value: Any) -> str:
    return f"`{json.dumps(value)}`"


def build(spec: Spec) -> list[Output]:
    params = spec[chat_tables.PARAMETERS_FILE]["parameters"]
    rows = [
        {
            "name": name,
            "origin": p["origin"],
            "treatment": p["treatment"],
            "schema": schema_words(p["schema"]),
            "default": value_words(p["default"]) if "default" in p else "",
            "noop": ", ".join(value_words(v) for v in p.get("noop_values", [])),
            "sampling": "yes" if p.get("sampling") else "",
            "requires": _requires(p),
            "description": p["description"],
            "reason": p.get("reason", ""),
        }
        for name, p in params.items()
    ]
    horde = [
        {"key": k, "schema": schema_words(v["schema"]), "default": value_words(v["default"]), **v}
        for k, v in spec[chat_tables.HORDE_FILE]["keys"].items()
    ]
    features = spec[chat_tables.FEATURES_FILE]
    limits = spec[chat_tables.LIMITS_FILE]
    decl = spec[chat_tables.DECLARATION_FILE]["declaration"]
    return [
        render(
            "docs_parameters.md.j2",
            spec.sources(chat_tables.PARAMETERS_FILE, chat_tables.HORDE_FILE),
            "docs/parameters.md",
            rows=rows,
            horde=horde,
            sampling=chat_tables.sampling_defaults(spec),
            drops=chat_tables.front_default_drops(spec),
            value=value_words,
        ),
        render(
            "docs_messages.md.j2",
            spec.sources(chat_tables.MESSAGES_FILE),
            "docs/messages.md",
            m=spec[chat_tables.MESSAGES_FILE],
            words=schema_words,
        ),
        render(
            "docs_features.md.j2",
            spec.sources(chat_tables.FEATURES_FILE, chat_tables.PARAMETERS_FILE),
            "docs/features.md",
            features=features["features"],
            guarantees=features["guarantees"],
            scopes=features.get("guarantee_scopes") or {},
            rows=rows,
        ),
        render(
            "docs_limits.md.j2",
            spec.sources(chat_tables.LIMITS_FILE, chat_tables.DECLARATION_FILE),
            "docs/limits.md",
            limits=limits["limits"],
            cpt=limits["chars_per_token_estimate"],
            absent=limits["absent_max_tokens"],
            decl=decl,
            words=schema_words,
            value=value_words,
        ),
    ]
