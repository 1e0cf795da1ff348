"""The default prompt screen (spec/moderation.yaml): it refuses the requests it exists for,
and never an ordinary prompt: its documented examples, and every prompt the suite, the
demo and the docs send (every string literal of tests/, runtime/, bench/ and tools/, every
line of the README and docs/)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from generated.errors import CorruptPrompt
from generated.moderation import DEFAULT_RULES, PASSING_EXAMPLES
from runtime.native.requests.moderation import Screen, screen
from tests.support import moderation

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("tests", "runtime", "bench", "tools")
REFUSED_HOME = Path(moderation.__file__).resolve()


@pytest.mark.parametrize("prompt", PASSING_EXAMPLES)
def test_the_documented_ordinary_prompts_pass(prompt: str) -> None:
    screen((), prompt)


@pytest.mark.parametrize("prompt", moderation.REFUSED_PROMPTS)
def test_the_requests_it_exists_for_are_refused(prompt: str) -> None:
    with pytest.raises(CorruptPrompt):
        screen((), prompt)
    with pytest.raises(CorruptPrompt):
        screen((), f"Some context first.\n{prompt.upper()}\nAnd more after.")


def _literals() -> Iterator[tuple[str, str]]:
    for folder in SCANNED:
        for path in sorted((REPO / folder).rglob("*.py")):
            if path.resolve() == REFUSED_HOME:
                continue
            tree = ast.parse(path.read_text("utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    yield f"{path.relative_to(REPO)}:{node.lineno}", node.value
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            yield f"{path.relative_to(REPO)}:{number}", line


def test_no_prompt_of_the_suite_the_demo_or_the_docs_is_refused() -> None:
    checked = Screen()
    refused = []
    count = 0
    for where, text in _literals():
        count += 1
        try:
            checked.check(text)
        except CorruptPrompt:
            refused.append(where)
    assert count > 5000  # the scan reached the suite
    assert refused == []


def test_each_rule_refuses_on_its_own_and_defaults_off_drops_them() -> None:
    assert set(DEFAULT_RULES) == {"underage_beside_sexual", "abuse_genre_names"}
    for prompt in (moderation.REFUSED_PROMPT, moderation.GENRE_NAME):
        with pytest.raises(CorruptPrompt):
            Screen().check(prompt)
        Screen(defaults=False).check(prompt)
    with pytest.raises(CorruptPrompt):
        Screen((r"\bforbidden\b",), defaults=False).check("a forbidden word")


def test_the_terms_must_stand_side_by_side_in_one_clause() -> None:
    for near in moderation.SIDE_BY_SIDE:
        with pytest.raises(CorruptPrompt):
            screen((), near)
    for apart in moderation.APART:
        screen((), apart)
