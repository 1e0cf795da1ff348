"""The engine registry: what runtime/contract implements, and codegen refusing the rest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codegen import chat_tables
from codegen.engine_check import engine_problems
from codegen.errors import SpecErrors
from codegen.spec import SPEC_ROOT, load_spec
from codegen.targets import chat
from runtime.contract import conversation, pricing, registry, requirements, validator, verification
from runtime.contract.validator import validate_chat_request
from runtime.front.responses_api import items as responses_items
from runtime.front.responses_api import request as responses_request
from tests.support.spec_edits import replace_once

# Every kind of the registry, with the engine dispatch table that implements it.
DISPATCH: dict[str, dict[str, Any]] = {
    "when_conditions": requirements.CONDITIONS,
    "treatments": validator.TREATMENTS,
    "conformance_modes": requirements.GUARANTEES_REQUIRED,
    "context_fit_modes": conversation.CONTEXT_FIT,
    "verification_rules": verification.RULES,
    "verification_reductions": verification.REDUCTIONS,
    "pricing_counted": pricing.MEASURES,
    "flattened_parts": conversation.PARTS,
    "responses_translations": responses_request.TRANSLATIONS,
    "responses_items": responses_items.ITEMS_RULES,
    "responses_parts": responses_items.PARTS_RULES,
}

# A parameter with a default whose feature is required under a condition the engine lacks.
GOLDEN = (
    "parameters:\n  golden:\n    description: A golden test key.\n    origin: horde\n"
    "    schema: {type: [integer, 'null'], minimum: 0}\n    default: 0\n"
    "    treatment: supported\n    requires:\n      - {feature: seed, when: above_three}\n"
)


def test_every_registry_kind_is_exactly_an_engine_dispatch_table() -> None:
    assert set(DISPATCH) == set(registry.ENGINE)
    for kind, table in DISPATCH.items():
        assert set(table) == set(registry.ENGINE[kind]), kind


def test_an_engine_table_apart_from_the_registry_is_refused_at_import() -> None:
    with pytest.raises(RuntimeError, match=r"missing \['always'\], unlisted \['sometimes'\]"):
        registry.implements(
            "when_conditions", [*registry.ENGINE["when_conditions"][1:], "sometimes"]
        )


def test_the_registry_imports_nothing_from_generated() -> None:
    code = (
        "import sys, runtime.contract.registry, codegen.engine_check\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'generated'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=SPEC_ROOT.parent, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_real_spec_names_only_what_the_engine_implements() -> None:
    assert engine_problems(load_spec()) == []


def test_a_new_when_condition_is_refused_until_the_engine_implements_it(
    spec_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replace_once(spec_copy / "chat/parameters.yaml", "parameters:\n", GOLDEN)
    spec = load_spec(spec_copy)
    with pytest.raises(SpecErrors) as info:
        chat.build(spec)
    (err,) = info.value.errors
    assert err.file == "spec/chat/parameters.yaml"
    assert err.path == "parameters.golden.requires[0].when"
    assert "'above_three' is not among the when conditions the engine implements" in err.problem
    assert "runtime/contract/requirements.py" in err.suggestion
    assert "runtime/contract/registry.py" in err.suggestion

    # The engine function, found by the name the spec uses, and its name in the registry.
    def above_three(name: str, request: dict[str, Any]) -> bool:
        return bool(request.get(name, 0) > 3)

    conditions = (*registry.ENGINE["when_conditions"], "above_three")
    monkeypatch.setitem(registry.ENGINE, "when_conditions", conditions)
    monkeypatch.setitem(requirements.CONDITIONS, "above_three", above_three)
    outputs = {o.path: o.text() for o in chat.build(spec)}
    assert "above_three" in outputs["chat/tables_request.py"]

    monkeypatch.setattr(requirements, "PARAMETERS", chat_tables.parameters(spec))
    plain = validate_chat_request({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert "seed" not in requirements.required_chat_features({**plain, "golden": 3})
    assert "seed" in requirements.required_chat_features({**plain, "golden": 4})


def test_a_conformance_mode_the_engine_lacks_is_refused(spec_copy: Path) -> None:
    replace_once(
        spec_copy / "chat/horde.yaml",
        "schema: {enum: [strict, best_effort]}",
        "schema: {enum: [strict, best_effort, lenient]}",
    )
    with pytest.raises(SpecErrors) as info:
        chat.build(load_spec(spec_copy))
    (err,) = info.value.errors
    assert (err.file, err.path) == ("spec/chat/horde.yaml", "keys.conformance.schema")
    assert "'lenient' is not among the conformance modes" in err.problem
