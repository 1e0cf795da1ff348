"""The rows of generated.signals: a family of completion signals on Redis pub/sub.

A family has one channel per request; an event is a small JSON object (``event``, ``id``
and the family's other fields) and never carries reply text. A family with an outcome also
stores the request's final status under a key of its own before publishing the end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SignalFamily:
    """One family's channel and outcome key patterns (``{id}``: the request id), its event
    kinds, the fields an event may carry (``event_field`` names its kind, ``id_field`` its
    request), and the kinds that end a request."""

    name: str
    channel_pattern: str
    event_field: str
    id_field: str
    fields: tuple[str, ...]
    events: tuple[str, ...]
    ending_events: frozenset[str]
    outcome_pattern: str | None = None
    outcome_seconds: int | None = None

    def channel(self, request_id: str) -> str:
        """The channel a request's events are published on."""
        return self.channel_pattern.format(id=request_id)

    def outcome_key(self, request_id: str) -> str:
        """The Redis key of a request's final status (kept ``outcome_seconds``)."""
        if self.outcome_pattern is None:
            raise ValueError(f"{self.name} signals store no outcome")
        return self.outcome_pattern.format(id=request_id)

    def event(self, event: str, request_id: str, **fields: Any) -> str:
        """The JSON text of one event."""
        if event not in self.events:
            raise ValueError(f"unknown {self.name} event {event!r}")
        unknown = set(fields) - set(self.fields)
        if unknown:
            raise ValueError(f"unknown {self.name} event fields {sorted(unknown)}")
        return json.dumps(
            {self.event_field: event, self.id_field: request_id, **fields}, separators=(",", ":")
        )

    def parse(self, data: str | bytes) -> dict[str, Any]:
        """An event read from the channel (a dict with at least its kind and request id)."""
        event = json.loads(data)
        if not isinstance(event, dict) or event.get(self.event_field) not in self.events:
            raise ValueError(f"not a {self.name} event: {data!r}")
        return event
