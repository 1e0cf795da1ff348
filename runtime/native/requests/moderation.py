"""The moderation screen: configurable patterns matched against a full submission.

A chat request is screened on its full submitted messages (flattened), before any
truncation, so dropping old turns cannot hide a match. Patterns are regular expressions,
matched case-insensitively anywhere in the text; they come from the settings
(``HORDE_MODERATION_PATTERNS``, one per line). No pattern, no screen.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from generated.errors import CorruptPrompt


@lru_cache(maxsize=8)
def compile_patterns(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """One alternation of every pattern; a bad pattern fails here, at startup, by name."""
    kept = [p for p in patterns if p.strip()]
    for pattern in kept:
        try:
            re.compile(pattern)
        except re.error as exc:
            problem = f"moderation pattern {pattern!r} is not a regular expression: {exc}"
            raise ValueError(problem) from None
    if not kept:
        return None
    return re.compile("|".join(f"(?:{p})" for p in kept), re.IGNORECASE)


def screen(patterns: Iterable[str], text: str) -> None:
    """Refuse ``text`` with CorruptPrompt when any pattern matches it."""
    matcher = compile_patterns(tuple(patterns))
    if matcher is not None and matcher.search(text):
        raise CorruptPrompt()
