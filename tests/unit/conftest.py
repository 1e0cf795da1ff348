"""Fixtures of the unit tests: a private copy of spec/ to break on purpose."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from codegen.spec import SPEC_ROOT


@pytest.fixture
def spec_copy(tmp_path: Path) -> Path:
    """spec/ copied into tmp_path, so a test can break it without touching the real one."""
    target = tmp_path / "spec"
    shutil.copytree(SPEC_ROOT, target)
    return target
