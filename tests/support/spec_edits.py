"""Editing a copy of spec/ in a test, to break it on purpose."""

from __future__ import annotations

from pathlib import Path


def replace_once(path: Path, old: str, new: str) -> None:
    """Replace the first ``old`` in ``path``; fails if ``old`` is not there (a stale edit)."""
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))
