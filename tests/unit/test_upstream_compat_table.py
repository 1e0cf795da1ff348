"""generated/docs/compatibility.md from spec/upstream_compat.yaml: codegen refuses a table
that no longer says the truth about our routes and schemas."""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.errors import SpecErrors
from codegen.spec import SPEC_ROOT, load_spec
from codegen.targets import docs_compat
from tests.support.spec_edits import replace_once

COMPAT = "upstream_compat.yaml"


def _refusals(spec: Path) -> list[str]:
    with pytest.raises(SpecErrors) as info:
        docs_compat.build(load_spec(spec))
    return [f"{e.path}: {e.problem}" for e in info.value.errors]


def test_a_served_route_must_have_upstreams_method_and_path(spec_copy: Path) -> None:
    replace_once(
        spec_copy / COMPAT,
        "{method: get, path: /find_user, ours: find_user,",
        "{method: post, path: /find_user, ours: find_user,",
    )
    (problem,) = _refusals(spec_copy)
    assert "find_user is GET /find_user" in problem


def test_a_same_field_must_exist_in_our_schema(spec_copy: Path) -> None:
    replace_once(spec_copy / COMPAT, "same: [reward]", "same: [reward, rewarded]")
    assert _refusals(spec_copy) == [
        f"models[{_index('SubmitOutput')}]: SubmitOutput has no rewarded"
    ]


def test_a_field_of_ours_upstream_lacks_is_listed_without_an_edit() -> None:
    (page,) = docs_compat.build(load_spec(SPEC_ROOT))
    assert "|  | `chat_count` | ours only |" in page.body
    assert "| `bridge_agent` | `bridge_agent` | same |  |" in page.body


def _index(ours: str) -> int:
    models = load_spec(SPEC_ROOT)[COMPAT]["models"]
    return next(i for i, m in enumerate(models) if m["ours"] == ours)
