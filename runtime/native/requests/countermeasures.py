"""Upstream's countermeasure on a source that sends corrupt prompts (its CounterMeasures:
report_suspicion, retrieve_timeout), with spec/moderation.yaml's numbers, kept in Redis.

Each CorruptPrompt refusal counts against its source (the client's address; behind the chat
front the forwarded one) and puts it in timeout for ``FIRST_TIMEOUT_MINUTES * (2 * earlier
+ 1)`` minutes, ``earlier`` being its refusals within the memory; meanwhile its text and chat
submits are refused with TimeoutIP. Both steps are best effort, as upstream's without its
Redis: an outage neither refuses submissions nor turns a CorruptPrompt into a 503.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from redis import Redis
from redis.exceptions import RedisError

from generated.errors import CorruptPrompt, TimeoutIP
from generated.moderation import (
    FIRST_TIMEOUT_MINUTES,
    SUSPICION_KEY,
    SUSPICION_MEMORY_SECONDS,
    TIMEOUT_KEY,
)

log = logging.getLogger(__name__)


def refuse_in_timeout(redis: Redis, source: str) -> None:
    """TimeoutIP while ``source`` is in timeout, with the seconds left."""
    _refuse(_timeout_left(redis, source))


def _timeout_left(redis: Redis, source: str) -> int:
    """The milliseconds left of ``source``'s timeout (0 or less: none); 0 when Redis failed."""
    try:
        return int(redis.pttl(TIMEOUT_KEY.format(source=source)))
    except RedisError as exc:
        log.warning("IP timeout of %s unread: Redis: %s", source, type(exc).__name__)
        return 0


def _refuse(left: int) -> None:
    if left > 0:
        seconds = left / 1000
        raise TimeoutIP(seconds=round(seconds), retry_after=seconds)


class AskedTimeout:
    """A source's timeout asked of Redis, its answer read later (``refuse``): its round trip
    overlaps the caller's next one (a chat submit's admission reads, in Postgres). Use as a
    context manager: an answer left unread when the block ends is read then, so the
    connection goes back to the pool clean. When the early ask fails (a connection Redis
    closed, say), ``refuse`` asks again as ``refuse_in_timeout`` does, with redis-py's
    retries; best effort all the same."""

    def __init__(self, redis: Redis, source: str) -> None:
        self._redis, self._source = redis, source
        self._connection: Any = None
        self._pending = True
        pool = redis.connection_pool
        try:
            connection: Any = pool.get_connection()  # redis-py's is untyped
        except RedisError:
            return
        try:
            connection.send_command("PTTL", TIMEOUT_KEY.format(source=source))
        except RedisError:  # redis-py disconnected it
            pool.release(connection)
            return
        self._connection = connection

    def __enter__(self) -> AskedTimeout:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._connection is not None:  # unread: read it, the connection goes back clean
            self._read()

    def refuse(self) -> None:
        """TimeoutIP while the source is in timeout, with the seconds left (asked once)."""
        if self._pending:
            self._pending = False
            left = self._read() if self._connection is not None else None
            _refuse(_timeout_left(self._redis, self._source) if left is None else left)

    def _read(self) -> int | None:
        """The early ask's answer; None when it failed."""
        connection, self._connection = self._connection, None
        try:
            return int(connection.read_response())
        except RedisError:
            connection.disconnect()
            return None
        finally:
            self._redis.connection_pool.release(connection)


def report_corrupt(redis: Redis, source: str) -> int:
    """Count a CorruptPrompt against ``source`` and put it in timeout; the timeout's
    minutes (0 when Redis could not be reached)."""
    suspicion = SUSPICION_KEY.format(source=source)
    try:
        with redis.pipeline(transaction=True) as pipe:
            pipe.incr(suspicion)
            pipe.expire(suspicion, SUSPICION_MEMORY_SECONDS)
            count, _ = pipe.execute()
        minutes = FIRST_TIMEOUT_MINUTES * (2 * (int(count) - 1) + 1)
        redis.set(TIMEOUT_KEY.format(source=source), 1, ex=minutes * 60)
    except RedisError as exc:
        log.warning("corrupt prompt from %s not counted: Redis: %s", source, type(exc).__name__)
        return 0
    log.warning("corrupt prompt from %s: in timeout for %d minutes", source, minutes)
    return minutes


@dataclass(frozen=True)
class Source:
    """Where a submission comes from, for its countermeasure."""

    redis: Redis
    address: str

    def refuse_in_timeout(self) -> None:
        refuse_in_timeout(self.redis, self.address)

    def ask_timeout(self) -> AskedTimeout:
        """``refuse_in_timeout`` in two halves: asked now, refused by ``refuse()`` later."""
        return AskedTimeout(self.redis, self.address)

    @contextmanager
    def counted(self) -> Iterator[None]:
        """A CorruptPrompt raised inside is counted against the source."""
        try:
            yield
        except CorruptPrompt:
            report_corrupt(self.redis, self.address)
            raise
