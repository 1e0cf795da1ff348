"""The prompt screen: the default rules (spec/moderation.yaml, generated.moderation) and the
operator's patterns (``HORDE_MODERATION_PATTERNS``, one regular expression a line), matched
case-insensitively anywhere in a submission (the default rules on the text lowercased, and
only when it holds one of their needles).

A text request is screened on its prompt, a chat request on its full submitted messages
(flattened), before any truncation, so dropping old turns cannot hide a match. A match is
CorruptPrompt; ``requests.countermeasures`` counts it against the source.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from generated.errors import CorruptPrompt
from generated.moderation import DEFAULT_NEEDLES, DEFAULT_RULES
from runtime.config import Settings


def _checked(patterns: tuple[str, ...]) -> list[str]:
    """The non-blank patterns; a bad one fails here, at startup, by name."""
    kept = [p for p in patterns if p.strip()]
    for pattern in kept:
        try:
            re.compile(pattern)
        except re.error as exc:
            problem = f"moderation pattern {pattern!r} is not a regular expression: {exc}"
            raise ValueError(problem) from None
    return kept


@lru_cache(maxsize=8)
def compile_patterns(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """One case-insensitive alternation of the operator's patterns; None for none."""
    kept = _checked(patterns)
    if not kept:
        return None
    return re.compile("|".join(f"(?:{p})" for p in kept), re.IGNORECASE)


DEFAULTS = re.compile("|".join(f"(?:{p})" for p in DEFAULT_RULES.values()))
"""The default rules as one alternation, matched on lowercased text (their terms are
lowercase: case-insensitive matching would cost ~4 times as much)."""


def matches_defaults(text: str) -> bool:
    """A default rule matches ``text``; searched only when the text holds a needle."""
    lowered = text.lower()
    return any(needle in lowered for needle in DEFAULT_NEEDLES) and bool(DEFAULTS.search(lowered))


def screen(patterns: Iterable[str], text: str, *, defaults: bool = True) -> None:
    """Refuse ``text`` with CorruptPrompt when a default rule (unless ``defaults`` is false)
    or one of ``patterns`` matches it."""
    matcher = compile_patterns(tuple(patterns))
    if (defaults and matches_defaults(text)) or (matcher is not None and matcher.search(text)):
        raise CorruptPrompt()


@dataclass(frozen=True)
class Screen:
    """A deployment's screen: its patterns, and whether the default rules apply."""

    patterns: tuple[str, ...] = ()
    defaults: bool = True

    @classmethod
    def of(cls, settings: Settings) -> Screen:
        return cls(settings.moderation_patterns, settings.moderation_defaults)

    def check(self, text: str) -> None:
        """CorruptPrompt when the screen matches ``text``."""
        screen(self.patterns, text, defaults=self.defaults)
