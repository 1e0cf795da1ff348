"""Upstream AI Horde's numbers for the text queue, in one place; tests may override them.

Lifetimes, the fault and abort limits and the upfront threshold follow upstream (see the
design folder's FACTS.md); so do the rate limits, which are spec/rate_limits.yaml's
(generated.rate_limits). ``Policy()`` is upstream's behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from generated.pricing import ANONYMOUS_CHARGE_PER_HOUR, HORDE_TAX, UPFRONT_MAX_LENGTH
from generated.rate_limits import RATE_LIMITS
from runtime.tables.rate_limits import RateLimit


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
    upfront_max_length: int = UPFRONT_MAX_LENGTH
    """Requests above this max_length * n need their kudos upfront."""
    horde_tax: int = HORDE_TAX
    """Kudos a text request pays when it is queued."""
    anonymous_charge_per_hour: float = ANONYMOUS_CHARGE_PER_HOUR
    """Kudos the anonymous user may be charged in an hour (spec/pricing.yaml economy): past
    it, anonymous requests are refused (AnonymousKudosExhausted)."""
    anonymous_priority: int = -(10**12)
    """Queue priority of the anonymous user: below any real balance."""
    default_concurrency: int = 30
    """Queued jobs (n) a user may have at once."""
    assumed_tokens_per_second: int = 10
    """Per worker thread, for the wait-time estimate when a worker has no speed samples."""
    speed_samples: int = 20
    """A worker's speed is the average of its newest this many samples (upstream's
    WORKER_SPEED_SAMPLE_LIMIT)."""
    workers_per_user: int = 3
    """Distinct worker names an untrusted user may register (upstream: 3)."""
    workers_per_trusted_user: int = 20
    """Distinct worker names a trusted user may register (upstream: 20)."""
    public_stats_seconds: float = 5.0
    """The text statistics and the load are read again at most this often per process
    (upstream caches its stats routes for 50 s); a test waiting for a count sets 0."""
    rate_limits: Mapping[str, tuple[RateLimit, ...]] = field(default_factory=lambda: RATE_LIMITS)
    """Per operation id, the native API's rate limits (spec/rate_limits.yaml); a test that
    needs more than one route's shipped limit replaces only that route's."""


SPEED_BASELINE = 1.0
"""Tokens per second a worker without speed samples counts as for ``slow_workers``
(upstream's SPEED_BASELINE_THINGS_PER_SEC): a fresh worker is slow until it has samples."""

SLOW_SPEEDS = ((20.0, 3.0), (13.0, 4.0), (0.0, 5.0))
"""(model billions at least, tokens per second): a worker slower than this for its first
model is slow, so a request with slow_workers false skips it (upstream's text_functions)."""
SLOW_SPEED_NO_MODEL = 3.0
"""The threshold for a worker that names no model (upstream)."""


def slow_speed(billions: float | None) -> float:
    """Upstream's slow threshold for a model of ``billions`` parameters (unknown: 0)."""
    size = billions or 0.0
    return next(speed for least, speed in SLOW_SPEEDS if size >= least)
