"""Wake waiting pops: published after the commit that queued or requeued work.

A wake is a hint (spec/signals.yaml ``wake``): every native API process's waiting pops that
serve one of its models (or all, for a wake naming none) pop again, and one that finds
nothing goes back to waiting. Publishing is best effort: a lost
wake only delays a waiting pop until its deadline, so a Redis error is logged, not raised.

This process's own waiting pops are woken directly too (``wake_here``: the app's hub, keyed
by the app's Redis client), before the publish: Redis's delivery back to this process's
subscription was ~0.5-1.5 ms of a new chat request's dispatch (commit to the waiting pop run
again, bench/dispatch.py, issue 14). The published wake still reaches every process, this
one included; a pop woken twice for one request runs once more at most and, finding
nothing, waits again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from redis import Redis
from redis.exceptions import RedisError

from generated.signals import WAKE_CHANNEL

log = logging.getLogger(__name__)

LocalWake = Callable[[frozenset[str]], None]
_HERE: dict[int, LocalWake] = {}
"""This process's apps' wake hooks, by the id of the Redis client their views publish with."""


def wake_here(redis: Redis, wake: LocalWake | None) -> None:
    """Wake this process's waiting pops with ``wake`` whenever ``wake_workers`` publishes on
    ``redis`` (the app's own client; None: no more, at the app's shutdown)."""
    if wake is None:
        _HERE.pop(id(redis), None)
    else:
        _HERE[id(redis)] = wake


def wake_workers(redis: Redis | None, models: list[str] | None = None) -> None:
    """Wake the waiting pops of workers serving one of ``models`` (a queued request's; none
    or empty: every waiting pop, as for a requeue). Call after the commit, or a woken pop
    finds nothing."""
    if redis is None:
        return
    named = sorted(set(models or []))
    here = _HERE.get(id(redis))
    if here is not None:
        here(frozenset(named))  # this process's waiting pops, without Redis's round trip
    try:
        redis.publish(WAKE_CHANNEL, json.dumps(named))
    except RedisError as exc:
        log.warning("wake not published: %s", exc)
