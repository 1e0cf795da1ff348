"""Completion signals: one shared Redis pub/sub connection for every open wait.

A wait costs a channel subscription and an ``asyncio.Event``, not a connection: the hub
owns one ``redis.asyncio`` PubSub, a reader task sets the event of the channel a message
arrives on, and ``watch(request_id)`` subscribes (waiting for Redis to confirm, so a signal
published after ``watch`` returns is never missed) and unsubscribes on exit. If the
connection drops, the reader reconnects, subscribes again to every open channel and wakes
every wait once, since signals may have been lost meanwhile; waits also poll slowly, so a
lost signal only delays a reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

CONFIRM_TIMEOUT = 2.0
RECONNECT_DELAY = 0.5


class _Channel:
    __slots__ = ("confirmed", "events")

    def __init__(self) -> None:
        self.events: set[asyncio.Event] = set()
        self.confirmed = asyncio.Event()


class SignalHub:
    """Wakes the waits of this process when their request's channel gets a message."""

    def __init__(self, redis: Redis, channel_of: Callable[[str], str]) -> None:
        self.redis = redis
        self.channel_of = channel_of
        self.channels: dict[str, _Channel] = {}
        self.received = 0
        self._pubsub: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        # redis-py's PubSub opens its connection on the first command; commands sent
        # concurrently before it exists would each open one (and be read by nobody).
        self._commands = asyncio.Lock()

    async def start(self) -> None:
        self._pubsub = self.redis.pubsub()
        self._reader = asyncio.create_task(self._read_forever(), name="front-signals")

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._pubsub is not None:
            with contextlib.suppress(RedisError, OSError):
                await self._pubsub.aclose()

    @contextlib.asynccontextmanager
    async def watch(self, request_id: str) -> AsyncIterator[asyncio.Event]:
        """An event set whenever the request's channel gets a message (clear it yourself)."""
        name = self.channel_of(request_id)
        event = asyncio.Event()
        channel = self.channels.get(name)
        if channel is None:
            channel = self.channels[name] = _Channel()
            channel.events.add(event)
            await self._send("subscribe", name)
        else:
            channel.events.add(event)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(channel.confirmed.wait(), CONFIRM_TIMEOUT)
            yield event
        finally:
            channel.events.discard(event)
            if not channel.events and self.channels.get(name) is channel:
                del self.channels[name]
                await self._send("unsubscribe", name)

    async def _send(self, command: str, name: str) -> None:
        try:
            async with self._commands:
                await getattr(self._pubsub, command)(name)
            self._wake.set()
        except (RedisError, OSError) as exc:
            log.warning("signal %s %s failed (the fallback poll covers it): %s", command, name, exc)

    async def _read_forever(self) -> None:
        while True:
            try:
                if not self._pubsub.subscribed:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                message = await self._pubsub.get_message(timeout=None)
                if message is not None:
                    self._dispatch(message)
            except (RedisError, OSError) as exc:
                log.warning("signal connection lost, reconnecting: %s", exc)
                await asyncio.sleep(RECONNECT_DELAY)
                await self._resubscribe()

    def _dispatch(self, message: dict[str, Any]) -> None:
        name = message.get("channel")
        if isinstance(name, bytes):
            name = name.decode()
        channel = self.channels.get(name) if isinstance(name, str) else None
        if channel is None:
            return
        if message.get("type") == "subscribe":
            channel.confirmed.set()
        elif message.get("type") == "message":
            self.received += 1
            for event in channel.events:
                event.set()

    async def _resubscribe(self) -> None:
        async with self._commands:
            with contextlib.suppress(RedisError, OSError):
                await self._pubsub.aclose()
            self._pubsub = self.redis.pubsub()
            names = list(self.channels)
            if names:
                with contextlib.suppress(RedisError, OSError):
                    await self._pubsub.subscribe(*names)
        for channel in self.channels.values():
            channel.confirmed.set()
            for event in channel.events:
                event.set()
