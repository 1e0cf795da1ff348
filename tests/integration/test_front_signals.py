"""The front's signal hub on a real Redis: one connection for every wait, the right wait
woken, subscriptions released, and a dropped connection survived (waits woken to re-read)."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from generated.signals import chat_channel, chat_event
from runtime.front.signals import SignalHub
from runtime.stores.embedded import EmbeddedStores

pytestmark = pytest.mark.integration

WAITS = 500


async def _hub_round_trip(redis_url: str) -> None:
    redis = Redis.from_url(redis_url, decode_responses=True)
    publisher = Redis.from_url(redis_url, decode_responses=True)
    hub = SignalHub(redis, chat_channel)
    await hub.start()
    try:
        woken: list[str] = []

        async def wait(request_id: str) -> None:
            async with hub.watch(request_id) as event:
                await asyncio.wait_for(event.wait(), 10)
                woken.append(request_id)

        ids = [f"hub-{i}" for i in range(WAITS)]
        tasks = [asyncio.create_task(wait(i)) for i in ids]
        while len(hub.channels) < WAITS or not all(
            c.confirmed.is_set() for c in hub.channels.values()
        ):
            await asyncio.sleep(0.01)
        numsub = dict(await publisher.pubsub_numsub(chat_channel(ids[0]), chat_channel("nobody")))
        assert numsub == {chat_channel(ids[0]): 1, chat_channel("nobody"): 0}
        for request_id in reversed(ids):
            await publisher.publish(chat_channel(request_id), chat_event("done", request_id))
        await asyncio.gather(*tasks)
        assert sorted(woken) == sorted(ids)
        assert hub.channels == {}  # every subscription released with its wait
        assert hub.received == WAITS

        # The pub/sub connection drops: the hub reconnects, wakes the open wait (signals may
        # have been lost meanwhile), and later signals arrive again.
        async with hub.watch("survivor") as event:
            await publisher.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
            await asyncio.wait_for(event.wait(), 10)
            event.clear()
            for _ in range(100):
                if await publisher.pubsub_numsub(chat_channel("survivor")) == [
                    (chat_channel("survivor"), 1)
                ]:
                    break
                await asyncio.sleep(0.05)
            await publisher.publish(chat_channel("survivor"), chat_event("done", "survivor"))
            await asyncio.wait_for(event.wait(), 10)
    finally:
        await hub.stop()
        await redis.aclose()
        await publisher.aclose()


def test_signal_hub(horde_stores: EmbeddedStores) -> None:
    asyncio.run(_hub_round_trip(horde_stores.redis_url))
