"""Wake waiting pops: published after the commit that queued or requeued work.

A wake is a hint (spec/signals.yaml ``wake``): every native API process's waiting pops pop
again, and one that finds nothing goes back to waiting. Publishing is best effort: a lost
wake only delays a waiting pop until its deadline, so a Redis error is logged, not raised.
"""

from __future__ import annotations

import logging

from redis import Redis
from redis.exceptions import RedisError

from generated.signals import WAKE_CHANNEL

log = logging.getLogger(__name__)
WAKE_MESSAGE = "1"
"""What a wake carries: nothing a reader needs."""


def wake_workers(redis: Redis | None) -> None:
    """Wake every waiting pop (call after the commit, or a woken pop finds nothing)."""
    if redis is None:
        return
    try:
        redis.publish(WAKE_CHANNEL, WAKE_MESSAGE)
    except RedisError as exc:
        log.warning("wake not published: %s", exc)
