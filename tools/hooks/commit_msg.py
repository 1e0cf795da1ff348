"""The commit-msg hook: a subject of at most 72 characters, the reasons in the body.

pre-commit runs it with the message file's path (``.pre-commit-config.yaml``,
``stages: [commit-msg]``). A ``fixup!`` or ``squash!`` subject passes: it is folded into
the commit it names before it lands.
"""

from __future__ import annotations

import sys
from pathlib import Path

MAX_SUBJECT = 72
FOLDED_PREFIXES = ("fixup! ", "squash! ", "amend! ")


def subject_problem(message: str) -> str | None:
    """Why the message's subject is refused, or None when it is fine."""
    lines = [line for line in message.splitlines() if not line.startswith("#")]
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return "the message is empty"
    subject = lines[0]
    if subject.startswith(FOLDED_PREFIXES):
        return None
    if len(subject) > MAX_SUBJECT:
        return (
            f"the subject is {len(subject)} characters, over {MAX_SUBJECT}: say what changed "
            "in a short subject and why in the body, after a blank line"
        )
    if len(lines) > 1 and lines[1].strip():
        return "the subject's second line is not blank: the body starts after a blank line"
    return None


def main(argv: list[str]) -> int:
    problem = subject_problem(Path(argv[1]).read_text(encoding="utf-8"))
    if problem is None:
        return 0
    print(f"commit-msg: {problem}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
