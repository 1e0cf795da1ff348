"""Emit a repeated literal once: sub-dicts that recur across generated data become named
module constants, and every place they stood refers to the constant.

``hoist(trees, preferred)`` finds every dict that occurs at least twice (compared by
``repr``, so key order and value types count) and is at least ``min_chars`` long, largest
first, and replaces each occurrence by a ``Ref`` whose ``repr`` is the constant's name.
A dict equal to a ``preferred`` value takes that name (a named schema keeps its name);
others are named after the key they stand under. The constants come back in dependency
order, ready to be written before the data that refers to them; the Python values are
equal to the originals, with repeated parts shared.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

PREFIX = "_SCHEMA_"


class Ref:
    """A reference to a hoisted constant: ``repr`` gives its name, so pprint writes it bare."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def _constant_name(hint: str) -> str:
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", hint)
    return PREFIX + (re.sub(r"[^A-Za-z0-9]+", "_", snake).strip("_").upper() or "PART")


SCHEMA_KEYWORDS = frozenset(
    {"properties", "items", "anyOf", "oneOf", "allOf", "additionalProperties", "$defs", "schema"}
)


def _hint(parent: str, key: Any) -> str:
    """What a dict under ``key`` is named after: the key, or its parent's name and the key
    when the key is a JSON Schema keyword."""
    if not isinstance(key, str):
        return parent
    return f"{parent}_{key}" if key in SCHEMA_KEYWORDS else key


def _walk(value: Any, hint: str, seen: Counter[str], first: dict[str, tuple[str, Any]]) -> None:
    """Count every dict under ``value`` by its repr; keep the first one's key and value."""
    if isinstance(value, dict):
        key = repr(value)
        seen[key] += 1
        first.setdefault(key, (hint, value))
        for name, item in value.items():
            _walk(item, _hint(hint, name), seen, first)
    elif isinstance(value, list | tuple):
        for item in value:
            _walk(item, hint, seen, first)


def _replace(value: Any, target: str, ref: Ref) -> Any:
    if isinstance(value, dict):
        if repr(value) == target:
            return ref
        return {k: _replace(v, target, ref) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, target, ref) for v in value]
    if isinstance(value, tuple):
        return tuple(_replace(v, target, ref) for v in value)
    return value


def _refs(value: Any) -> list[str]:
    if isinstance(value, Ref):
        return [value.name]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _refs(v)]
    if isinstance(value, list | tuple):
        return [n for v in value for n in _refs(v)]
    return []


def hoist(
    trees: dict[str, Any], preferred: dict[str, Any] | None = None, min_chars: int = 100
) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    """(constants in dependency order, ``trees`` with the repeated dicts as ``Ref``s)."""
    names_by_value = {repr(v): _constant_name(n) for n, v in (preferred or {}).items()}
    constants: dict[str, Any] = {}
    trees = dict(trees)
    while True:
        seen: Counter[str] = Counter()
        first: dict[str, tuple[str, Any]] = {}
        for label, tree in [*trees.items(), *constants.items()]:
            _walk(tree, label, seen, first)
        repeated = [k for k, n in seen.items() if n > 1 and len(k) >= min_chars]
        if not repeated:
            break
        target = max(repeated, key=lambda k: (len(k), k))
        hint, value = first[target]
        name = names_by_value.get(target) or _constant_name(hint)
        while name in constants:
            name += "_"
        ref = Ref(name)
        constants = {n: _replace(v, target, ref) for n, v in constants.items()}
        trees = {label: _replace(tree, target, ref) for label, tree in trees.items()}
        constants[name] = value
    return _ordered(constants), trees


def _ordered(constants: dict[str, Any]) -> list[tuple[str, Any]]:
    done: dict[str, Any] = {}

    def visit(name: str) -> None:
        if name in done:
            return
        for dep in _refs(constants[name]):
            visit(dep)
        done[name] = constants[name]

    for name in constants:
        visit(name)
    return list(done.items())
