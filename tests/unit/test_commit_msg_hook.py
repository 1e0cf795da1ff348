"""The commit-msg hook refuses long subjects and a body glued to the subject."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools.hooks.commit_msg import MAX_SUBJECT, subject_problem

HOOK = Path(__file__).resolve().parents[2] / "tools" / "hooks" / "commit_msg.py"


def test_a_short_subject_with_a_body_passes() -> None:
    assert subject_problem("fix: keep the lane's limit headers\n\nBecause reasons.\n") is None


def test_a_subject_over_the_limit_is_refused_with_its_length() -> None:
    subject = "fix: " + "x" * (MAX_SUBJECT - 4)
    problem = subject_problem(subject + "\n")
    assert problem is not None
    assert f"{MAX_SUBJECT + 1} characters" in problem


def test_a_subject_at_the_limit_passes() -> None:
    assert subject_problem("x" * MAX_SUBJECT) is None


def test_git_comment_lines_and_leading_blanks_are_not_the_subject() -> None:
    message = "\n# Please enter the commit message\nfeat: one\n# " + "y" * 200 + "\n"
    assert subject_problem(message) is None


@pytest.mark.parametrize("message", ["", "\n\n# only a comment\n"])
def test_an_empty_message_is_refused(message: str) -> None:
    assert subject_problem(message) == "the message is empty"


def test_a_body_glued_to_the_subject_is_refused() -> None:
    assert subject_problem("feat: one\nand the body\n") is not None


def test_a_fixup_of_a_long_subject_passes() -> None:
    assert subject_problem("fixup! " + "z" * MAX_SUBJECT) is None


def test_the_hook_exits_non_zero_on_a_refusal(tmp_path: Path) -> None:
    message = tmp_path / "COMMIT_EDITMSG"
    message.write_text("w" * (MAX_SUBJECT + 1) + "\n", encoding="utf-8")
    run = subprocess.run(
        [sys.executable, str(HOOK), str(message)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 1
    assert "commit-msg:" in run.stderr
    message.write_text("docs: short\n", encoding="utf-8")
    ok = subprocess.run([sys.executable, str(HOOK), str(message)], check=False)
    assert ok.returncode == 0
