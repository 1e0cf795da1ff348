"""How long the front holds a submit the native rate limit refused
(``NativeClient._held_for_rate_limit``): the refusal's own wait, read from retry-after-ms
before Retry-After, and up to a tenth more; never past the submit's patience."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import aiohttp
import pytest

from generated.errors import RateLimited, TooManyPrompts
from runtime.front import native_client
from runtime.front.native_client import RATE_LIMIT_JITTER, Answer, NativeClient, _retry_after


def answer(**headers: str) -> Answer:
    return Answer(429, b'{"message": "m", "rc": "RateLimited"}', headers)


def test_the_wait_is_read_from_retry_after_ms_before_retry_after() -> None:
    assert _retry_after(answer(**{"retry-after-ms": "938", "retry-after": "1"})) == 0.938
    assert _retry_after(answer(**{"retry-after": "2"})) == 2.0
    # a malformed or negative milliseconds header falls back to the seconds
    assert _retry_after(answer(**{"retry-after-ms": "soon", "retry-after": "3"})) == 3.0
    assert _retry_after(answer(**{"retry-after-ms": "-5", "retry-after": "3"})) == 3.0
    assert _retry_after(answer(**{"retry-after-ms": "nan"})) is None
    assert _retry_after(answer()) is None


def held(error: Any, *, waited: float, share: float, patience: float = 10.0) -> list[float]:
    """The pauses the client slept holding ``error``, the jitter's random draw at ``share``."""
    pauses: list[float] = []

    async def scenario() -> bool:
        async with aiohttp.ClientSession() as http:
            client = NativeClient(
                http,
                ("http://127.0.0.1:9",),
                passkey=None,
                client_agent="t:1:t",
                submit_patience=patience,
            )
            return await client._held_for_rate_limit(error, waited)

    # The patches replace module functions every thread shares (an earlier test's server
    # thread may still sleep on its own loop): only this thread's calls are the client's.
    ours = threading.get_ident()
    sleep, draw = asyncio.sleep, random.random

    async def slept(seconds: float) -> None:
        if threading.get_ident() != ours:
            return await sleep(seconds)
        pauses.append(seconds)
        return None

    def drawn() -> float:
        return share if threading.get_ident() == ours else draw()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native_client.random, "random", drawn)
        patch.setattr(native_client.asyncio, "sleep", slept)
        kept = asyncio.run(scenario())
    assert kept == bool(pauses)
    return pauses


def test_a_refused_submit_waits_its_window_out_and_at_most_a_tenth_more() -> None:
    refused = RateLimited(limit="2 per 1 second", seconds="0.94", retry_after=0.94)
    assert held(refused, waited=0.0, share=0.0) == [0.94]
    assert held(refused, waited=0.0, share=1.0) == [pytest.approx(0.94 * (1 + RATE_LIMIT_JITTER))]
    # past the patience the client gets the 429 instead
    assert held(refused, waited=9.5, share=0.0) == []
    # without a wait of its own, the spec's
    bare = RateLimited(limit="l", seconds="1")
    assert held(bare, waited=0.0, share=0.0) == [float(RateLimited.default_retry_after or 0)]


def test_only_a_rate_limit_is_held() -> None:
    busy = TooManyPrompts(count=31, concurrency=30, retry_after=1)
    assert held(busy, waited=0.0, share=0.0) == []


def test_another_threads_sleeps_are_not_taken_for_the_clients() -> None:
    # A server thread of an earlier test (uvicorn's main loop sleeps 0.1 s a tick) calls the
    # patched asyncio.sleep too; a CI run once counted its ticks as the client's pauses.
    stop = threading.Event()

    async def ticking() -> None:
        # a thread's Event, set from the test's thread; the sleep is looked up at each call
        while not stop.is_set():  # noqa: ASYNC110 (the ticks are the point, as uvicorn's)
            await asyncio.sleep(0.0005)

    ticker = threading.Thread(target=asyncio.run, args=(ticking(),))
    ticker.start()
    try:
        busy = TooManyPrompts(count=31, concurrency=30, retry_after=1)
        for _ in range(20):
            assert held(busy, waited=0.0, share=0.0) == []
    finally:
        stop.set()
        ticker.join(timeout=10)
