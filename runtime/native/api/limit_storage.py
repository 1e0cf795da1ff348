"""flask-limiter's Redis storage at one round trip per limit.

With headers on, flask-limiter spends three round trips a limit (the hit, then a GET and a
TTL for the X-RateLimit headers). ``CountingRedisStorage`` answers them with one script
returning count and time to live, kept on ``flask.g`` for this request's header reads; other
reads go to Redis as before. The workers' lane takes both from ``incr_ttl``. Selected by the
``horde+`` prefix on the storage URI (``storage_uri``).
"""

from __future__ import annotations

import threading
import time
from typing import Any, cast

from flask import g, has_request_context
from limits.storage import RedisStorage
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

SCHEME_PREFIX = "horde+"
INCR_TTL = b"""
local current = redis.call("incrby", KEYS[1], ARGV[2])
if tonumber(current) == tonumber(ARGV[2]) then
    redis.call("expire", KEYS[1], ARGV[1])
end
return {current, redis.call("pttl", KEYS[1])}
"""
"""limits' incr_expire script, returning the key's time to live (milliseconds) beside its
count: the window's end to the millisecond, which a refusal's retry-after-ms tells the
client (Redis's TTL rounds to the second)."""
SEEN = "horde_limit_counts"
PACKED_COMMANDS = 10_000
"""How many keys' packed commands ``incr_ttl`` keeps (a key is a limit's window for a
client and route: the workers' addresses, a few per worker)."""


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
        self._commands: dict[tuple[str, int, int], Any] = {}
        self._held = threading.local()

    def incr_ttl(self, key: str, expiry: int, amount: int = 1) -> tuple[int, float]:
        """Count ``amount`` on ``key``: its count and the time its window ends, in one
        script call (the workers' lane reads both without flask's ``g``).

        The call is its EVALSHA command packed once per key and sent on a connection this
        thread holds: redis-py's Script call packs every argument again and runs its
        command, retry and instrumentation layers, and taking a pooled connection at each
        call costs more and shares the pool's lock between the lane's threads
        (docs/performance.md; a workers' lane request makes one call). The connection
        stays in the pool's books as in use, so closing the pool closes it. A connection
        that fails is dropped and the call tried once more on a fresh one, as redis-py's
        retry does; a script Redis lost (a restart) is loaded again by the Script call."""
        full = self.prefixed_key(key)
        for attempt in (1, 2):
            connection = self._connection()
            try:
                packed = self._packed(connection, full, expiry, amount)
                connection.send_packed_command(packed, check_health=False)
                count, pttl = connection.read_response()
            except NoScriptError:
                count, pttl = self.lua_incr_ttl([full], [expiry, amount])
            except (RedisConnectionError, RedisTimeoutError):
                self._drop(connection)
                if attempt == 2:
                    raise
                continue
            except BaseException:
                self._drop(connection)  # a reply half read must not stay on the connection
                raise
            return int(count), max(int(pttl), 0) / 1000 + time.time()
        raise AssertionError("unreachable")

    def _pool(self) -> Any:
        return cast(Redis, self.get_connection()).connection_pool  # limits' client is one

    def _connection(self) -> Any:
        """This thread's connection, taken from the pool at its first call."""
        connection = getattr(self._held, "connection", None)
        if connection is None:
            connection = self._held.connection = self._pool().get_connection()
        return connection

    def _drop(self, connection: Any) -> None:
        """Give a failed connection back to its pool, disconnected; the next call takes
        another."""
        self._held.connection = None
        connection.disconnect()
        self._pool().release(connection)

    def _packed(self, connection: Any, full_key: str, expiry: int, amount: int) -> Any:
        """The EVALSHA command for a key, packed once (the cache is cleared when full)."""
        found = self._commands.get((full_key, expiry, amount))
        if found is None:
            if len(self._commands) >= PACKED_COMMANDS:
                self._commands.clear()
            found = connection.pack_command(
                "EVALSHA", self.lua_incr_ttl.sha, 1, full_key, expiry, amount
            )
            self._commands[(full_key, expiry, amount)] = found
        return found

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
        """The window's end to the millisecond (limits' own reads TTL, whole seconds)."""
        seen = _seen()
        if seen is not None and key in seen:
            return seen[key][1]
        pttl = cast(Redis, self.get_connection(True)).pttl(self.prefixed_key(key))
        return max(int(pttl), 0) / 1000 + time.time()
