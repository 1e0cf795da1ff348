"""Refuse a spec naming a condition, rule or mode the chat contract engine does not implement.

The spec names by string what runtime/contract/ (and the Responses API's translation rules,
runtime/front/responses_api/) dispatch on: requirements' ``when``, treatments, modes,
verification rules, priced parts, rendered content parts. This check compares them with
``runtime.contract.registry.ENGINE``, so a name with no code fails ``make check-generated``
(file, path, problem, suggestion) instead of raising KeyError at run time.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Any

from codegen.errors import SpecError, SpecErrors
from codegen.spec import Spec
from runtime.contract import registry

PARAMETERS_FILE = "chat/parameters.yaml"
HORDE_FILE = "chat/horde.yaml"
MESSAGES_FILE = "chat/messages.yaml"
VERIFICATION_FILE = "chat/verification.yaml"
PRICING_FILE = "chat/pricing.yaml"
RESPONSES_PARAMETERS_FILE = "responses/parameters.yaml"
RESPONSES_INPUT_FILE = "responses/input.yaml"

# kind -> the engine module that dispatches on it (named in the suggestion).
_WHERE = {
    "when_conditions": "CONDITIONS in runtime/contract/requirements.py",
    "treatments": "TREATMENTS in runtime/contract/validator.py",
    "conformance_modes": "GUARANTEES_REQUIRED in runtime/contract/requirements.py",
    "context_fit_modes": "CONTEXT_FIT in runtime/contract/conversation.py",
    "verification_rules": "RULES in runtime/contract/verification.py",
    "verification_reductions": "REDUCTIONS in runtime/contract/verification.py",
    "pricing_counted": "MEASURES in runtime/contract/pricing.py",
    "flattened_parts": "PARTS in runtime/contract/conversation.py",
    "responses_translations": "TRANSLATIONS in runtime/front/responses_api/request.py",
    "responses_items": "ITEMS_RULES in runtime/front/responses_api/items.py",
    "responses_parts": "PARTS_RULES in runtime/front/responses_api/items.py",
}

# A use of a name in the spec: (kind, file, path, name).
_Use = tuple[str, str, str, str]


def _enum(schema: Any) -> list[str]:
    """The string values of a schema's enum (also inside anyOf)."""
    if not isinstance(schema, dict):
        return []
    values = [v for v in schema.get("enum", []) if isinstance(v, str)]
    for sub in schema.get("anyOf", []):
        values += _enum(sub)
    return values


def _uses(spec: Spec) -> Iterator[_Use]:
    for name, p in spec[PARAMETERS_FILE]["parameters"].items():
        yield "treatments", PARAMETERS_FILE, f"parameters.{name}.treatment", p["treatment"]
        for i, r in enumerate(p.get("requires", [])):
            path = f"parameters.{name}.requires[{i}].when"
            yield "when_conditions", PARAMETERS_FILE, path, r["when"]
    horde = spec[HORDE_FILE]["keys"]
    for key, kind in (("conformance", "conformance_modes"), ("context_fit", "context_fit_modes")):
        for value in _enum(horde[key]["schema"]):
            yield kind, HORDE_FILE, f"keys.{key}.schema", value
    verification = spec[VERIFICATION_FILE]
    for section in ("rules", "reductions"):
        for name, entry in verification[section].items():
            kind = "verification_rules" if section == "rules" else "verification_reductions"
            yield kind, VERIFICATION_FILE, f"{section}.{name}", name
            for mode in entry["modes"]:
                yield "conformance_modes", VERIFICATION_FILE, f"{section}.{name}.modes", mode
    for part in spec[PRICING_FILE]["counted"]:
        yield "pricing_counted", PRICING_FILE, f"counted.{part}", part
    for part in spec[MESSAGES_FILE]["content_parts"]:
        yield "flattened_parts", MESSAGES_FILE, f"content_parts.{part}", part
    yield from _responses_uses(spec)


def _responses_uses(spec: Spec) -> Iterator[_Use]:
    """The treatments and rules spec/responses/ names."""
    file = RESPONSES_PARAMETERS_FILE

    def walk(prefix: str, keys: dict[str, Any]) -> Iterator[_Use]:
        for name, p in keys.items():
            at = f"{prefix}{name}"
            yield "treatments", file, f"{at}.treatment", p["treatment"]
            if "translation" in p:
                yield "responses_translations", file, f"{at}.translation", p["translation"]
            yield from walk(f"{at}.keys.", p.get("keys", {}))

    yield from walk("parameters.", spec[file]["parameters"])
    data = spec[RESPONSES_INPUT_FILE]
    for item, entry in data["items"].items():
        path = f"items.{item}.translation"
        yield "responses_items", RESPONSES_INPUT_FILE, path, entry["translation"]
    for part, entry in data["content_parts"].items():
        path = f"content_parts.{part}.becomes"
        yield "responses_parts", RESPONSES_INPUT_FILE, path, entry["becomes"]


# Kinds the engine applies to every request or reply, so the spec must give each one.
_EVERY_ONE = {
    "verification_rules": (VERIFICATION_FILE, "rules"),
    "verification_reductions": (VERIFICATION_FILE, "reductions"),
}


def engine_problems(spec: Spec) -> list[SpecError]:
    """Each name the spec uses that the engine lacks, and each rule it applies the spec lacks."""
    engine = registry.ENGINE
    problems: list[SpecError] = []
    for kind, file, path, name in _uses(spec):
        known = engine[kind]
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        problems.append(
            SpecError(
                f"spec/{file}",
                path,
                f"{name!r} is not among the {kind.replace('_', ' ')} the engine implements "
                f"({', '.join(known)})",
                f"{hint}or implement it: add a function to {_WHERE[kind]} and the name to "
                f"ENGINE[{kind!r}] in runtime/contract/registry.py",
            )
        )
    for kind, (file, section) in _EVERY_ONE.items():
        for name in engine[kind]:
            if name not in spec[file][section]:
                problems.append(
                    SpecError(
                        f"spec/{file}",
                        section,
                        f"the engine applies {name!r} ({_WHERE[kind]}) but the spec omits it",
                        f"add {section}.{name} with its modes",
                    )
                )
    return problems


def check_engine(spec: Spec) -> None:
    """Raise SpecErrors listing every name the engine and the spec disagree on."""
    problems = engine_problems(spec)
    if problems:
        raise SpecErrors(problems)
