"""The moderation screen and the chat settings read from the environment."""

from __future__ import annotations

import pytest

from generated.errors import CorruptPrompt
from runtime.config import Settings
from runtime.native.requests.moderation import screen


def test_patterns_match_case_insensitively_anywhere() -> None:
    screen([r"\bbad\b"], "a fine text")
    with pytest.raises(CorruptPrompt):
        screen([r"\bbad\b"], "user: something BAD here")


def test_no_pattern_screens_nothing_and_a_broken_one_is_named() -> None:
    screen([], "anything")
    screen(["", "  "], "anything")
    with pytest.raises(ValueError, match=r"'\(unclosed'"):
        screen(["(unclosed"], "text")


def test_settings_read_the_passkey_and_one_pattern_per_line() -> None:
    env = {"HORDE_SERVICE_PASSKEY": "s3cret", "HORDE_MODERATION_PATTERNS": "one\n\ntwo[0-9]"}
    settings = Settings.from_env(env)
    assert settings.service_passkey == "s3cret"
    assert settings.moderation_patterns == ("one", "two[0-9]")
    assert Settings.from_env({}).service_passkey is None
