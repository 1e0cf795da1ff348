"""The front's signal hub on a real Redis: one pattern subscription for every wait, the right
wait woken, opening and closing a wait sending Redis nothing, a message that arrives before
its wait opens held for it, and a dropped connection survived (waits woken to re-read)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

import pytest
from redis.asyncio import Redis

from generated.signals import CHAT_SIGNALS
from generated.wire.native import ChatStatus
from runtime.front import signals
from runtime.front.native_client import NativeClient, native_session
from runtime.front.signals import SignalHub
from runtime.front.waiter import ReplyWait, WaitBudget
from runtime.stores.embedded import EmbeddedStores
from tests.support.redis_commands import command_calls

pytestmark = pytest.mark.integration

WAITS = 500
BUDGET = WaitBudget(deadline=30, grace=20, poll_interval=10, queue_info_wait=2)


async def _calls(redis: Redis, *commands: str) -> dict[str, int]:
    return command_calls(await redis.info("commandstats"), *commands)


async def _until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(400):
        if condition():
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"{what} did not happen within 10 s")


async def _listening_hub(redis_url: str) -> tuple[SignalHub, Redis]:
    hub = SignalHub(Redis.from_url(redis_url, decode_responses=True), CHAT_SIGNALS.channel)
    await hub.start()
    await hub.listening.wait(10)
    return hub, Redis.from_url(redis_url, decode_responses=True)


async def _close(hub: SignalHub, publisher: Redis) -> None:
    await hub.stop()
    await hub.redis.aclose()
    await publisher.aclose()


async def _hub_round_trip(redis_url: str) -> None:
    hub, publisher = await _listening_hub(redis_url)
    try:
        assert await publisher.pubsub_numpat() == 1
        before = await _calls(publisher, "subscribe", "unsubscribe", "psubscribe")
        woken: list[str] = []

        async def wait(request_id: str) -> None:
            async with hub.watch(request_id) as event:
                await asyncio.wait_for(event.wait(), 10)
                woken.append(request_id)

        ids = [f"hub-{i}" for i in range(WAITS)]
        tasks = [asyncio.create_task(wait(i)) for i in ids]
        await _until(lambda: len(hub.channels) == WAITS, "every wait open")
        assert await publisher.pubsub_channels(CHAT_SIGNALS.channel("*")) == []  # none of its own
        for request_id in reversed(ids):
            await publisher.publish(
                CHAT_SIGNALS.channel(request_id), CHAT_SIGNALS.event("done", request_id)
            )
        await asyncio.gather(*tasks)
        assert sorted(woken) == sorted(ids)
        assert hub.channels == {}  # every wait released
        assert hub.received == WAITS
        # 500 waits opened and closed, and Redis was sent no subscription of any kind
        assert await _calls(publisher, "subscribe", "unsubscribe", "psubscribe") == before

        # The pub/sub connection drops: the hub reconnects, wakes the open wait (signals may
        # have been lost meanwhile), and later signals arrive again.
        async with hub.watch("survivor") as event:
            await publisher.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
            await asyncio.wait_for(event.wait(), 10)
            event.clear()
            assert hub.reconnects == 1
            assert await publisher.pubsub_numpat() == 1
            await publisher.publish(
                CHAT_SIGNALS.channel("survivor"), CHAT_SIGNALS.event("done", "survivor")
            )
            await asyncio.wait_for(event.wait(), 10)
    finally:
        await _close(hub, publisher)


def test_signal_hub(horde_stores: EmbeddedStores) -> None:
    asyncio.run(_hub_round_trip(horde_stores.redis_url))


async def _held_for_the_wait(redis_url: str) -> None:
    hub, publisher = await _listening_hub(redis_url)
    try:
        # the submit is sent; its request ends and its event arrives before the wait opens
        since = hub.mark()
        assert since is not None
        key = CHAT_SIGNALS.outcome_key("early")
        await publisher.publish(
            CHAT_SIGNALS.channel("early"), CHAT_SIGNALS.event("done", "early", outcome=key)
        )
        await _until(lambda: hub.received == 1, "the event read")
        early = await hub.subscribe("early", since)
        assert (early.heard, early.is_set(), early.outcome) == (True, True, key)
        quiet = await hub.subscribe("quiet", since)  # nothing arrived for this one
        assert (quiet.heard, quiet.is_set(), quiet.outcome) == (True, False, None)
        unmarked = await hub.subscribe("unmarked")  # no mark: anything may have been missed
        assert unmarked.heard is False
        for request_id, signal in (("early", early), ("quiet", quiet), ("unmarked", unmarked)):
            hub.release(request_id, signal)

        # more messages than the hub keeps arrive meanwhile: the mark is no longer heard
        since = hub.mark()
        assert since is not None
        for i in range(signals.RECENT + 1):
            await publisher.publish(
                CHAT_SIGNALS.channel(f"other-{i}"), CHAT_SIGNALS.event("done", f"other-{i}")
            )
        await _until(lambda: hub.received == signals.RECENT + 2, "the events read")
        overrun = await hub.subscribe("overrun", since)
        assert overrun.heard is False
        hub.release("overrun", overrun)
        since = hub.mark()
        assert since is not None
        assert (await hub.subscribe("after", since)).heard is True

        # the connection drops after the mark: the new one may have missed its messages
        await publisher.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        await _until(lambda: hub.epoch == 2 and hub.listening.is_set(), "the hub back")
        assert (await hub.subscribe("across", since)).heard is False
        # a channel's second wait cannot know what reached its first: it looks the key up
        assert (await hub.subscribe("across", hub.mark())).heard is False
    finally:
        await _close(hub, publisher)


def test_a_message_read_before_its_wait_opens_is_held_for_it(
    horde_stores: EmbeddedStores,
) -> None:
    asyncio.run(_held_for_the_wait(horde_stores.redis_url))


async def _open(
    hub: SignalHub, request_id: str, since: signals.Mark | None
) -> tuple[ReplyWait, int]:
    """A wait opened on ``request_id`` with a status that needs nothing more, and the Redis
    GETs its opening sent (the native client points at a closed port: no status read)."""
    first = cast(ChatStatus, {"done": False, "is_possible": True, "eligible_threads": 1})
    async with native_session() as http:
        native = NativeClient(
            http, ("http://127.0.0.1:9",), passkey=None, client_agent="test:0:test"
        )
        before = await _calls(hub.redis, "get")
        async with ReplyWait(native, hub, request_id, {}, BUDGET, since=since) as wait:
            await wait.open(first)
        after = await _calls(hub.redis, "get")
    return wait, after["get"] - before["get"]


async def _opening_reads(redis_url: str) -> None:
    hub, publisher = await _listening_hub(redis_url)
    try:
        # heard, nothing arrived: the wait opens without asking Redis anything
        wait, gets = await _open(hub, "heard-quiet", hub.mark())
        assert (wait.reads, wait.outcome_reads, gets) == (0, 0, 0)
        # not heard: it looks the outcome key up once
        wait, gets = await _open(hub, "unheard", None)
        assert (wait.reads, wait.outcome_reads, gets) == (0, 0, 1)
        # heard, and its event named the outcome key: the final status is read from there
        since = hub.mark()
        key = CHAT_SIGNALS.outcome_key("heard-done")
        await publisher.set(key, '{"done": true, "faulted": false, "generations": []}')
        await publisher.publish(
            CHAT_SIGNALS.channel("heard-done"),
            CHAT_SIGNALS.event("done", "heard-done", outcome=key),
        )
        await _until(lambda: hub.received == 1, "the event read")
        wait, gets = await _open(hub, "heard-done", since)
        assert (wait.reads, wait.outcome_reads, gets) == (0, 1, 1)
        assert wait.status is not None
        assert wait.status["done"] is True
    finally:
        await _close(hub, publisher)


def test_a_heard_wait_opens_without_looking_its_outcome_up(horde_stores: EmbeddedStores) -> None:
    asyncio.run(_opening_reads(horde_stores.redis_url))


def test_a_hub_without_redis_opens_waits_at_once_and_unheard() -> None:
    async def run() -> None:
        hub = SignalHub(
            Redis.from_url("redis://127.0.0.1:9", decode_responses=True), CHAT_SIGNALS.channel
        )
        await hub.start()
        try:
            signal = await asyncio.wait_for(hub.subscribe("no-redis", None), 5)
            assert signal.heard is False
            await _until(lambda: hub.broken, "the refusal noticed")
            assert hub.mark() is None
        finally:
            await hub.stop()
            await hub.redis.aclose()

    asyncio.run(run())
