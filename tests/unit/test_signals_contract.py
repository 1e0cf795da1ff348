"""The completion signal's contract (spec/signals.yaml -> generated/signals.py)."""

from __future__ import annotations

import json

import pytest

from generated.signals import (
    CHAT_EVENT_DONE,
    CHAT_EVENT_GENERATION,
    CHAT_SIGNALS,
)


def test_channel_name_follows_the_design_doc() -> None:
    assert CHAT_SIGNALS.channel("abc-123") == "horde:chat:abc-123"


def test_event_is_small_json_without_text() -> None:
    raw = CHAT_SIGNALS.event(CHAT_EVENT_GENERATION, "r1", generation_id="g1")
    assert json.loads(raw) == {"event": "generation", "id": "r1", "generation_id": "g1"}
    assert CHAT_SIGNALS.parse(raw.encode())["generation_id"] == "g1"


def test_event_refuses_unknown_kinds_and_fields() -> None:
    with pytest.raises(ValueError, match="unknown chat event"):
        CHAT_SIGNALS.event("finished", "r1")
    with pytest.raises(ValueError, match="fields"):
        CHAT_SIGNALS.event(CHAT_EVENT_DONE, "r1", text="the reply")
    with pytest.raises(ValueError, match="not a chat event"):
        CHAT_SIGNALS.parse(b'{"event": "nope", "id": "r1"}')


def test_every_ending_event_is_an_event_and_generation_does_not_end() -> None:
    assert CHAT_SIGNALS.ending_events.issubset(CHAT_SIGNALS.events)
    assert CHAT_EVENT_GENERATION not in CHAT_SIGNALS.ending_events
    assert CHAT_EVENT_DONE in CHAT_SIGNALS.ending_events
