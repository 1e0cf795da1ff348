"""Wake waiting pops: published after the commit that queued or requeued work.

A wake is a hint (spec/signals.yaml ``wake``): waiting pops for one of its models pop again,
and one that finds nothing waits again. A lost wake only delays a pop to its deadline, so a
Redis error is logged, not raised. This process's own pops are woken directly first
(``wake_here``), saving Redis's delivery back to us (docs/performance.md), and the longest
waiting one serving a named model runs at once on the waking thread; the published wake
still reaches every process, so a pop may run once more for nothing. A caller on a
completion's path may wake its own pops at the commit (``wake_local``) and publish a little
later (``publish_wake``): the message comes back to this process too, and read while the
woken pop runs it slows that pop.
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
    finds nothing (and as ``wake_local`` says)."""
    publish_wake(redis, wake_local(redis, models))


def wake_local(redis: Redis | None, models: list[str] | None = None) -> list[str]:
    """``wake_workers`` for this process's waiting pops alone, without Redis's round trip;
    the wake's models, for ``publish_wake`` to send the other processes after. With models,
    one of those pops may run on this thread first (about a millisecond): call it after the
    commit, holding no connection or lock."""
    named = sorted(set(models or []))
    here = None if redis is None else _HERE.get(id(redis))
    if here is not None:
        here(frozenset(named))
    return named


def publish_wake(redis: Redis | None, named: list[str]) -> None:
    """``wake_workers`` for every process's waiting pops, through Redis (``named``:
    ``wake_local``'s models)."""
    if redis is None:
        return
    try:
        redis.publish(WAKE_CHANNEL, json.dumps(named))
    except RedisError as exc:
        log.warning("wake not published: %s", exc)
