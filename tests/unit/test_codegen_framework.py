"""The generator itself: refusing bad specs with file, path and suggestion; determinism."""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.__main__ import check, generate
from codegen.errors import SpecErrors
from codegen.spec import SPEC_ROOT, load_spec

REPO = SPEC_ROOT.parent


def test_unknown_key_names_file_path_and_suggestion(spec_copy: Path) -> None:
    path = spec_copy / "errors.yaml"
    text = path.read_text().replace(
        "  MissingPrompt:\n", "  MissingPrompt:\n    no_retyr: true\n", 1
    )
    path.write_text(text)
    with pytest.raises(SpecErrors) as info:
        load_spec(spec_copy)
    (err,) = info.value.errors
    assert err.file == "spec/errors.yaml"
    assert err.path == "errors.MissingPrompt"
    assert "no_retyr" in err.problem
    assert "no_retry" in err.suggestion


def test_missing_schema_key_is_refused(spec_copy: Path) -> None:
    (spec_copy / "extra.yaml").write_text("errors: {}\n")
    with pytest.raises(SpecErrors) as info:
        load_spec(spec_copy)
    assert info.value.errors[0].file == "extra.yaml"
    assert "$schema" in info.value.errors[0].suggestion


def test_generate_twice_is_byte_identical_and_check_passes(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    assert generate(SPEC_ROOT, first) == 0
    assert generate(SPEC_ROOT, second) == 0
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files
    for rel in files:
        assert (first / rel).read_bytes() == (second / rel).read_bytes()
    assert check(SPEC_ROOT, first) == 0


def test_check_names_a_hand_edited_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gen"
    generate(SPEC_ROOT, out)
    edited = out / "errors.py"
    edited.write_text(edited.read_text() + "\n# hand edit\n")
    (out / "stray.py").write_text("")
    assert check(SPEC_ROOT, out) == 1
    err = capsys.readouterr().err
    assert "differs: generated/errors.py" in err
    assert "stale): generated/stray.py" in err


def test_every_generated_file_has_the_do_not_edit_header() -> None:
    for path in (REPO / "generated").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            first = path.read_text().splitlines()[0]
            assert "make generate" in first, path
            assert "DO NOT EDIT" in first, path
