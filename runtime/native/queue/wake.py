"""Wake waiting pops: published after the commit that queued or requeued work.

A wake is a hint (spec/signals.yaml ``wake``): every native API process's waiting pops that
serve one of its models (or all, for a wake naming none) pop again, and one that finds
nothing goes back to waiting. Publishing is best effort: a lost
wake only delays a waiting pop until its deadline, so a Redis error is logged, not raised.
"""

from __future__ import annotations

import json
import logging

from redis import Redis
from redis.exceptions import RedisError

from generated.signals import WAKE_CHANNEL

log = logging.getLogger(__name__)


def wake_workers(redis: Redis | None, models: list[str] | None = None) -> None:
    """Wake the waiting pops of workers serving one of ``models`` (a queued request's; none
    or empty: every waiting pop, as for a requeue). Call after the commit, or a woken pop
    finds nothing."""
    if redis is None:
        return
    try:
        redis.publish(WAKE_CHANNEL, json.dumps(sorted(set(models or []))))
    except RedisError as exc:
        log.warning("wake not published: %s", exc)
