"""spec/moderation.yaml -> generated/moderation.py (each default rule as one regular
expression, the ordinary prompts they must pass, the countermeasure's numbers and Redis
keys) and generated/docs/moderation.md.

A pair rule becomes one expression: a first term and a second term side by side, in either
order, with only the separator, a possessive after the first and joiner words between."""

from __future__ import annotations

import re
from itertools import zip_longest
from typing import Any

from codegen.errors import SpecError, SpecErrors
from codegen.render import Output, render
from codegen.spec import Spec

SOURCE = "moderation.yaml"
TIMEOUTS_SHOWN = 5
"""How many successive timeouts the reference tabulates."""


def _any(terms: list[str]) -> str:
    return "(?:" + "|".join(terms) + ")"


def rule_pattern(rule: dict[str, Any], separator: str, possessive: str) -> str:
    """The rule's regular expression (matched case-insensitively)."""
    if "terms" in rule:
        return rf"\b{_any(rule['terms'])}\b"
    pair = rule["pair"]
    first, second = _any(pair["first"]), _any(pair["second"])
    joined = f"(?:{separator}{_any(pair['joiners'])})*{separator}" if pair["joiners"] else separator
    return rf"\b{first}{possessive}{joined}{second}\b|\b{second}{joined}{first}\b"


def _problem(name: str, problem: str, fix: str) -> SpecErrors:
    return SpecErrors([SpecError(f"spec/{SOURCE}", f"default_rules.{name}", problem, fix)])


def _compiled(name: str, pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise _problem(name, str(exc), "fix the expression") from exc
    if re.search(r"(?<!\\)[A-Z]", pattern):
        raise _problem(name, "an uppercase letter never matches", "write it in lowercase")
    return pattern


def _threaded(name: str, rule: dict[str, Any]) -> list[str]:
    """The rule's needles, once each term that every match holds is seen to contain one."""
    terms = rule["pair"]["second"] if "pair" in rule else rule["terms"]
    for term in terms:
        if not any(needle in term for needle in rule["needles"]):
            raise _problem(name, f"no needle is in the term {term!r}", "add one to needles")
    needles: list[str] = rule["needles"]
    return needles


def build(spec: Spec) -> list[Output]:
    data: dict[str, Any] = spec[SOURCE]
    separator, possessive = data["separator"], data["possessive"]
    rules = {
        name: _compiled(name, rule_pattern(rule, separator, possessive))
        for name, rule in data["default_rules"].items()
    }
    needles = tuple(
        sorted({n for name, r in data["default_rules"].items() for n in _threaded(name, r)})
    )
    tables = {
        name: list(zip_longest(rule["pair"]["first"], rule["pair"]["second"], fillvalue=""))
        for name, rule in data["default_rules"].items()
        if "pair" in rule
    }
    measure = data["countermeasure"]
    timeouts = [measure["first_timeout_minutes"] * (2 * n + 1) for n in range(TIMEOUTS_SHOWN)]
    context = {
        "m": data, "rules": rules, "needles": needles, "tables": tables, "measure": measure,
        "timeouts": timeouts,
    }  # fmt: skip
    sources = spec.sources(SOURCE)
    return [
        render("moderation.py.j2", sources, "moderation.py", **context),
        render("docs_moderation.md.j2", sources, "docs/moderation.md", **context),
    ]
