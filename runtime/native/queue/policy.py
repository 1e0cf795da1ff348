"""Upstream AI Horde's numbers for the text queue, in one place; tests may override them.

Lifetimes, the fault and abort limits, the upfront threshold and the rate limits follow
upstream (see the design folder's FACTS.md). ``Policy()`` is upstream's behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RateLimits:
    """flask-limiter strings, per remote address unless the name says per key."""

    text_async_ip: str = "90 per minute;2 per second"
    text_async_key: str = "2 per second"
    status: str = "60 per minute"
    pop_submit_ip: str = "60 per second"

    def scaled(self, factor: int) -> RateLimits:
        """Every limit multiplied by ``factor`` (tests raise them; 1 keeps upstream's)."""

        def scale(limits: str) -> str:
            parts = []
            for part in limits.split(";"):
                amount, rest = part.strip().split(" ", 1)
                parts.append(f"{int(amount) * factor} {rest}")
            return ";".join(parts)

        return RateLimits(*(scale(v) for v in vars(self).values()))


@dataclass(frozen=True)
class Policy:
    waiting_expiry_seconds: int = 20 * 60
    """A request still waiting after this long expires."""
    generation_ttl_seconds: int = 150
    """A popped job not submitted within this is aborted and its slot requeued."""
    fault_limit: int = 2
    """A request with more faulted generations than this is faulted."""
    abort_limit_per_hour: int = 20
    """A worker with more aborted jobs than this in an hour goes into maintenance."""
    worker_stale_seconds: int = 300
    """A worker not seen for this long no longer counts as online."""
    upfront_max_length: int = 512
    """Requests above this max_length * n need their kudos upfront."""
    horde_tax: int = 1
    """Kudos a text request pays when it is queued."""
    anonymous_priority: int = -(10**12)
    """Queue priority of the anonymous user: below any real balance."""
    default_concurrency: int = 30
    """Queued jobs (n) a user may have at once."""
    assumed_tokens_per_second: int = 10
    """Per worker thread, for the wait-time estimate when a worker has no history."""
    rate_limits: RateLimits = RateLimits()
