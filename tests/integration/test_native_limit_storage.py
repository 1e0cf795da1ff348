"""The native limiter's storage (runtime.native.api.limit_storage): a limited call costs one
Redis round trip per limit, and its X-RateLimit headers still say what Redis holds.

The test lowers /status/models' limit to 3 per hour (an hour's window cannot end between
its calls) so the counts and the refusal are exact.
"""

from __future__ import annotations

import time

import httpx
import pytest

from generated.rate_limits import KEY_PEER
from runtime.native.server import NativeService
from runtime.tables.rate_limits import RateLimit
from tests.support.native import route_limits
from tests.support.redis_commands import command_calls

pytestmark = pytest.mark.integration


def _calls(service: NativeService) -> dict[str, int]:
    return command_calls(service.context.redis.info("commandstats"), "get", "pttl", "evalsha")


def test_a_limited_call_reads_no_count_back_and_its_headers_match_redis(
    native_service: NativeService, native_client: httpx.Client
) -> None:
    with route_limits(native_service, "models", RateLimit("3 per hour", KEY_PEER)):
        answers = [native_client.get("/status/models")]  # loads the script (redis-py retries)
        before = _calls(native_service)
        answers += [native_client.get("/status/models") for _ in range(2)]
        refused_sent = time.monotonic()
        answers.append(native_client.get("/status/models"))
        after = _calls(native_service)
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert [a.headers["X-RateLimit-Remaining"] for a in answers[:3]] == ["2", "1", "0"]
    assert {a.headers["X-RateLimit-Limit"] for a in answers[:3]} == {"3"}
    # the headers came from the hit's own script (its PTTL is counted among Redis' commands),
    # not from a GET and a TTL of the client's after each hit
    assert after["evalsha"] - before["evalsha"] == 3
    assert after["get"] == before["get"]
    assert after["pttl"] - before["pttl"] == 3
    redis = native_service.context.redis
    (key,) = [k for k in redis.keys("*") if "LIMITER" in k]
    left = int(redis.pttl(key))
    since_refused = (time.monotonic() - refused_sent) * 1000
    assert int(str(redis.get(key))) == 4  # the refused call is counted too, as limits counts it
    # the refusal's wait is the window's end to the millisecond: what Redis has left of the
    # key now, and at most the time since the refused call was sent more
    assert 0 <= int(answers[3].headers["retry-after-ms"]) - left <= since_refused + 1
    reset = int(answers[2].headers["X-RateLimit-Reset"])
    assert abs(reset - (time.time() + redis.ttl(key))) <= 2


@pytest.mark.parametrize("lost", ["script", "connections"])
def test_a_hit_counts_in_redis_after_redis_lost_its_script_or_connections(
    native_service: NativeService, native_client: httpx.Client, lost: str
) -> None:
    """The hit's packed EVALSHA (``incr_ttl``): a script Redis no longer holds (a restart,
    SCRIPT FLUSH) is loaded again, and a pooled connection Redis closed is replaced; either
    way the hit is counted in Redis, not in the limiter's in-memory fallback."""
    redis = native_service.context.redis
    with route_limits(native_service, "models", RateLimit("3 per hour", KEY_PEER)):
        first = native_client.get("/status/models")
        if lost == "script":
            redis.script_flush()
        else:
            redis.client_kill_filter(_type="normal", skipme=True)
        second = native_client.get("/status/models")
    assert [first.status_code, second.status_code] == [200, 200]
    assert [first.headers["X-RateLimit-Remaining"], second.headers["X-RateLimit-Remaining"]] == [
        "2",
        "1",
    ]
    (key,) = [k for k in redis.keys("*") if "LIMITER" in k]
    assert int(str(redis.get(key))) == 2
