"""flask-limiter's Redis storage at one round trip per limit.

With the headers on, flask-limiter spends three Redis round trips on a limit of a request:
the hit (``limits``' incr script), then a GET and a TTL for the X-RateLimit headers.
``CountingRedisStorage`` answers all three with one script that increments and returns the
count and the time to live together; the headers' reads of a key this request just hit are
answered from what the script returned (kept on ``flask.g``, so only for that request). Any
other read goes to Redis as before. The workers' lane, served without Flask, takes both
from ``incr_ttl``. The service selects it with the ``horde+`` prefix on
the storage URI (``storage_uri``).
"""

from __future__ import annotations

import time
from typing import Any

from flask import g, has_request_context
from limits.storage import RedisStorage

SCHEME_PREFIX = "horde+"
INCR_TTL = b"""
local current = redis.call("incrby", KEYS[1], ARGV[2])
if tonumber(current) == tonumber(ARGV[2]) then
    redis.call("expire", KEYS[1], ARGV[1])
end
return {current, redis.call("ttl", KEYS[1])}
"""
"""limits' incr_expire script, returning the key's time to live beside its count."""
SEEN = "horde_limit_counts"


def storage_uri(uri: str) -> str:
    """``uri`` (a ``limits`` Redis URI) for ``CountingRedisStorage``."""
    return SCHEME_PREFIX + uri


def _seen() -> dict[str, tuple[int, float]] | None:
    if not has_request_context():
        return None
    seen: dict[str, tuple[int, float]] = g.setdefault(SEEN, {})
    return seen


class CountingRedisStorage(RedisStorage):
    STORAGE_SCHEME = [  # noqa: RUF012 (limits reads it from the class; it is never changed)
        SCHEME_PREFIX + scheme for scheme in ("redis", "rediss", "redis+unix")
    ]

    def __init__(self, uri: str, **options: Any) -> None:
        super().__init__(uri.removeprefix(SCHEME_PREFIX), **options)

    def initialize_storage(self, uri: str) -> None:
        super().initialize_storage(uri)
        self.lua_incr_ttl = self.get_connection().register_script(INCR_TTL)

    def incr_ttl(self, key: str, expiry: int, amount: int = 1) -> tuple[int, float]:
        """Count ``amount`` on ``key``: its count and the time its window ends, in one
        script call (the workers' lane reads both without flask's ``g``)."""
        count, ttl = self.lua_incr_ttl([self.prefixed_key(key)], [expiry, amount])
        return int(count), max(int(ttl), 0) + time.time()

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        count, reset = self.incr_ttl(key, expiry, amount)
        seen = _seen()
        if seen is not None:
            seen[key] = (count, reset)
        return count

    def get(self, key: str) -> int:
        seen = _seen()
        if seen is not None and key in seen:
            return seen[key][0]
        return super().get(key)

    def get_expiry(self, key: str) -> float:
        seen = _seen()
        if seen is not None and key in seen:
            return seen[key][1]
        return super().get_expiry(key)
