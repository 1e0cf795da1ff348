"""The suite needs nothing beside the repository, and OpenAI's document in it stays honest.

A copy of the repository alone in an empty folder passes the unit tests that read OpenAI's
document. The copy holds what a clone would: the files git tracks (their working-tree
content; a new file counts once it is `git add`-ed), or the tree without .venv, var/ and
caches when there is no .git. It runs with this interpreter (the same .venv); nothing sits
beside it, so a test reading outside the repository fails, and so does one that skips.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support.openai_schema import openai_document

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "tests" / "unit"
LONE_COPY = "HORDE_CHAT_LONE_COPY"
IMPORTS_SCHEMA = re.compile(r"^from tests\.support\.openai_schema import", re.MULTILINE)
NOT_COPIED = (
    ".git",
    ".venv",
    "var",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
)


def _tracked_files() -> list[str] | None:
    """The files git tracks, or None without a usable git checkout (a tarball, no git)."""
    if not (REPO / ".git").exists():
        return None
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached"], cwd=REPO, check=True, capture_output=True
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return None
    return [name for name in listed.split("\0") if name]


def _copy_repository(target: Path) -> None:
    tracked = _tracked_files()
    if tracked is None:
        shutil.copytree(REPO, target, ignore=shutil.ignore_patterns(*NOT_COPIED))
        return
    for name in tracked:
        source = REPO / name
        if source.is_file():  # tracked but deleted in the working tree: not copied
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def _schema_users() -> list[str]:
    """The unit test files that load OpenAI's document (a new one is picked up by itself)."""
    return sorted(
        f"tests/unit/{p.name}"
        for p in UNIT.glob("test_*.py")
        if p.name != Path(__file__).name and IMPORTS_SCHEMA.search(p.read_text(encoding="utf-8"))
    )


@pytest.mark.slow
def test_a_lone_copy_passes_the_unit_tests_that_read_openais_document(tmp_path: Path) -> None:
    assert LONE_COPY not in os.environ, "the lone-copy check ran inside a lone copy"
    files = _schema_users()
    assert "tests/unit/test_chat_contract_spec.py" in files
    lone = tmp_path / "empty" / "horde-chat"
    _copy_repository(lone)
    assert [p.name for p in lone.parent.iterdir()] == ["horde-chat"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    env[LONE_COPY] = str(lone)

    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import codegen, tests.support.openai_schema as s; "
            "print(codegen.__file__); print(s.__file__)",
        ],
        cwd=lone,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all(Path(p).is_relative_to(lone) for p in where), f"imported outside the copy: {where}"

    report = tmp_path / "report.xml"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--tb=line",
            f"--junitxml={report}",
            *files,
        ],
        cwd=lone,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, f"in a lone copy:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    assert counts["tests"] > 0, counts
    assert counts["failures"] == counts["errors"] == 0, counts
    assert counts["skipped"] == 0, f"skipped in a lone copy: {counts}\n{run.stdout[-4000:]}"


def test_openais_document_is_the_one_its_source_note_names() -> None:
    """The vendored document is upstream's file unedited: its sha256 is the one in SOURCE."""
    folder = REPO / "tests" / "support" / "openai-openapi"
    noted = re.search(r"sha256 ([0-9a-f]{64})", (folder / "SOURCE").read_text(encoding="utf-8"))
    assert noted, "tests/support/openai-openapi/SOURCE names no sha256"
    actual = hashlib.sha256((folder / "openapi.yaml").read_bytes()).hexdigest()
    assert actual == noted[1], "openapi.yaml differs from the commit SOURCE names: update SOURCE"
    assert (folder / "LICENSE").read_text(encoding="utf-8").startswith("The MIT License")


def test_the_coverage_check_names_a_request_property_without_a_treatment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever document is loaded, a CreateChatCompletionRequest property that
    spec/chat/parameters.yaml does not classify fails the coverage test by name."""
    from tests.unit import test_chat_contract_spec as coverage

    document = openai_document()
    schemas = dict(document["components"]["schemas"])
    request = schemas["CreateChatCompletionRequest"]
    extra = {"type": "object", "properties": {"made_up_by_openai": {"type": "string"}}}
    schemas["CreateChatCompletionRequest"] = {**request, "allOf": [*request["allOf"], extra]}
    grown = {**document, "components": {**document["components"], "schemas": schemas}}
    monkeypatch.setattr(coverage, "openai_document", lambda: grown)

    with pytest.raises(AssertionError, match=r"classify these in .*\['made_up_by_openai'\]"):
        coverage.test_every_openai_request_property_has_a_treatment()
    monkeypatch.undo()
    coverage.test_every_openai_request_property_has_a_treatment()
