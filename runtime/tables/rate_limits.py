"""The rows of generated.rate_limits: one limit of one native route."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RateLimit:
    """One limit of a route, in flask-limiter's notation (``90 per minute``), counted on
    ``key`` (a ``generated.rate_limits.KEY_*``); ``anonymous`` is the anonymous key's own
    value, ``service`` the budget of the chat front's calls presenting its passkey."""

    limit: str
    key: str
    anonymous: str | None = None
    service: str | None = None
