"""codegen.shared_literals: a repeated dict is written once and the data stays equal."""

from __future__ import annotations

import pprint
from typing import Any

from codegen.shared_literals import hoist

PART = {"type": "object", "required": ["type", "text"], "properties": {"text": {"type": "string"}}}
BIG = {"type": "object", "properties": {"a": PART, "b": {"anyOf": [PART, {"type": "null"}]}}}


def _emit(constants: list[tuple[str, Any]], trees: dict[str, Any]) -> dict[str, Any]:
    source = "".join(f"{name} = {pprint.pformat(value)}\n" for name, value in constants)
    source += "".join(f"{label} = {pprint.pformat(tree)}\n" for label, tree in trees.items())
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    return namespace


def test_repeated_dicts_become_one_constant_each_and_the_data_is_unchanged() -> None:
    trees = {"DEFS": {"front": {"Big": BIG}, "native": {"Big": BIG, "Part": PART}}}
    constants, hoisted = hoist(trees, preferred={"Big": BIG}, min_chars=40)
    names = [name for name, _ in constants]
    assert names == ["_SCHEMA_PART", "_SCHEMA_BIG"]  # dependencies first, schema names kept
    namespace = _emit(constants, hoisted)
    assert namespace["DEFS"] == trees["DEFS"]
    assert namespace["DEFS"]["front"]["Big"] is namespace["DEFS"]["native"]["Big"]


def test_short_or_single_dicts_stay_inline() -> None:
    trees = {"A": {"x": {"type": "string"}, "y": {"type": "string"}}, "B": {"only": BIG}}
    constants, hoisted = hoist(trees, min_chars=40)
    assert [name for name, _ in constants] == ["_SCHEMA_A"]  # PART repeats in BIG, under "a"
    assert hoisted["A"] == trees["A"]
    assert _emit(constants, hoisted)["B"] == trees["B"]
