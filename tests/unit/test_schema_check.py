"""The compiled fast path of every schema check agrees with jsonschema.

``SchemaCheck`` lets a value through when jsonschema-rs passes it and asks jsonschema
otherwise, so a value jsonschema-rs passes but jsonschema refuses would be accepted where it
was refused before. For every route's body and header schema (both surfaces), values built
from the schema's own names and constants (and integers past 64 bits, which jsonschema-rs
cannot take) get the same verdict from both, and each route's refusals keep jsonschema's
error.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generated.routes import HEADERS, ROUTES
from runtime.contract.schema_check import SchemaCheck
from runtime.tables.route_schemas import DEFS


def _walk(node: Any, names: set[str], scalars: list[Any]) -> None:
    if isinstance(node, dict):
        names.update(k for k in node if not k.startswith("$"))
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                names.update(value)
            if key in ("enum", "examples") and isinstance(value, list):
                scalars.extend(v for v in value if not isinstance(v, (dict, list)))
            if key in ("const", "default", "minimum", "maximum") and not isinstance(
                value, (dict, list)
            ):
                scalars.append(value)
            _walk(value, names, scalars)
    elif isinstance(node, list):
        for item in node:
            _walk(item, names, scalars)


def _schemas() -> list[tuple[str, dict[str, Any]]]:
    found = [
        (f"body {op}", {**route.body, "$defs": DEFS[route.surface]})
        for op, route in sorted(ROUTES.items())
        if route.body
    ]
    found += [
        (f"header {surface} {name}", {**spec.schema, "$defs": DEFS[surface]})
        for surface, headers in sorted(HEADERS.items())
        for name, spec in sorted(headers.items())
    ]
    return found


SCHEMAS = _schemas()


def _values(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    names: set[str] = set()
    scalars: list[Any] = []
    _walk(schema, names, scalars)
    keys = st.sampled_from(sorted(names)) if names else st.text(max_size=8)
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=20),
        st.sampled_from(scalars or [0]),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=6)
        ),
        max_leaves=20,
    )


SEEDS: dict[str, dict[str, Any]] = {
    "body chat_async": {"model": "m", "messages": [{"role": "user", "content": "Hi"}]},
    "body chat_completions": {"model": "m", "messages": [{"role": "user", "content": "Hi"}]},
    "body text_async": {"prompt": "Once", "params": {"max_length": 80}},
    "body text_pop": {"name": "w", "models": ["m"], "max_length": 512},
    "body text_progress": {"id": "00000000-0000-0000-0000-000000000000", "seq": 0, "delta": "x"},
    "body text_submit": {"id": "00000000-0000-0000-0000-000000000000", "generation": "x"},
}
"""A valid value of each body, mutated into near-valid ones (a random value set or removed
at a random place): where a wrong verdict of the fast path would hide."""


def _mutated(seed: dict[str, Any], values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    def apply(edits: list[tuple[int, str, Any, bool]]) -> Any:
        value = copy.deepcopy(seed)
        for place, key, new, remove in edits:
            nodes = [n for n in _nodes(value) if isinstance(n, (dict, list))]
            node = nodes[place % len(nodes)]
            if isinstance(node, dict):
                if remove:
                    node.pop(key, None)
                else:
                    node[key] = new
            elif node and not remove:
                node[place % len(node)] = new
            elif node:
                node.pop()
        return value

    names: set[str] = set()
    _walk(seed, names, [])
    edit = st.tuples(st.integers(0, 50), st.sampled_from(sorted(names)), values, st.booleans())
    return st.lists(edit, min_size=0, max_size=3).map(apply)


def _nodes(value: Any) -> list[Any]:
    found = [value]
    children = value.values() if isinstance(value, dict) else value
    if isinstance(value, (dict, list)):
        for child in children:
            found += _nodes(child)
    return found


@pytest.mark.parametrize(("name", "schema"), SCHEMAS, ids=[n for n, _ in SCHEMAS])
def test_the_fast_path_agrees_with_jsonschema(name: str, schema: dict[str, Any]) -> None:
    check = SchemaCheck(schema)
    values = _values(schema)
    if name in SEEDS:
        assert check.validator.is_valid(SEEDS[name]), f"{name}: the seed is not valid"
        values = st.one_of(values, _mutated(SEEDS[name], values))

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(values)
    def agrees(value: Any) -> None:
        valid = check.validator.is_valid(value)
        if check.passes(value):
            assert valid, f"{name}: jsonschema-rs passed what jsonschema refuses: {value!r}"
        assert (check.error(value) is None) == valid

    agrees()


def test_a_refusal_is_jsonschemas_error() -> None:
    check = SchemaCheck({"type": "object", "properties": {"n": {"type": "integer"}}})
    error = check.error({"n": "one"})
    assert error is not None
    assert error.validator == "type"
    assert list(error.absolute_path) == ["n"]
    assert check.error({"n": 2**80}) is None  # past 64 bits: jsonschema decides
    assert check.error({"n": 1}) is None
