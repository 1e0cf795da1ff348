"""Completion signals: one shared Redis pub/sub connection for every open wait.

A wait costs a channel subscription and a ``Signal`` (a ``Flag``: an event), not a
connection: the hub owns one ``redis.asyncio`` PubSub, a reader task sets the signal of the
channel a message arrives on (noting the outcome key the event names, where the native API
stored the request's final status), and ``watch(request_id)`` subscribes (waiting for Redis
to confirm, so a signal published after ``watch`` returns is never missed) and unsubscribes
on exit. ``outcome(key)`` reads a final status stored there (None when it is not, or Redis
cannot answer: read the status route).

Redis may fail or restart at any time and no wait fails for it: a lost connection (or a
subscribe that fails) marks the hub broken; while broken, new waits subscribe nothing and
do not wait for a confirmation, and the reader reconnects with a growing pause, subscribes
again to every open channel and then wakes every wait once, since signals may have been lost
meanwhile. Waits also poll slowly, so a lost signal only delays a reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from generated.signals import CHAT_FIELD_OUTCOME, parse_chat_event
from generated.wire.native import ChatStatus

log = logging.getLogger(__name__)

CONFIRM_TIMEOUT = 2.0
RECONNECT_DELAY = 0.5
"""The first pause before reconnecting (doubled after each failure, up to RECONNECT_MAX)."""
RECONNECT_MAX = 4.0


class Flag:
    """asyncio.Event's set / clear / is_set / wait, with a timeout of its own and no deque.

    An open wait holds its Signal, its channel's confirmation flag and its client's
    disconnect flag until it ends: as asyncio.Events they were ~2.3 KiB of a wait's ~33 (each
    Event allocates a deque of its waiters, ~0.76 KiB, and a dict), and waiting on one with
    a timeout took asyncio.wait_for, a Task wrapping ``wait()``. Here the waiters are a list
    made on the first wait, and ``wait(timeout)`` is one future and one timer in the caller's
    own task."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[bool]] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        """Set it and wake every waiter (as asyncio.Event: a waiter woken before a
        ``clear`` still returns True)."""
        self._set = True
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(True)

    def clear(self) -> None:
        self._set = False

    async def wait(self, seconds: float | None = None) -> bool:
        """True once set (at once if it is); False after ``seconds``."""
        if self._set:
            return True
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        timer = None if seconds is None else loop.call_later(seconds, _time_up, waiter)
        try:
            return await waiter
        finally:
            if timer is not None:
                timer.cancel()
            self._forget(waiter)

    def _forget(self, waiter: asyncio.Future[bool]) -> None:
        """A waiter that returned (a ``set`` already dropped every waiter it woke)."""
        if self._waiters is not None and waiter in self._waiters:
            self._waiters.remove(waiter)


def _time_up(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


class Signal(Flag):
    """Set whenever the request's channel gets a message (clear it yourself); ``outcome``
    is the outcome key the latest event named, if any."""

    __slots__ = ("outcome",)

    def __init__(self) -> None:
        super().__init__()
        self.outcome: str | None = None


class _Channel:
    __slots__ = ("confirmed", "events")

    def __init__(self) -> None:
        self.events: set[Signal] = set()
        self.confirmed = Flag()


class SignalHub:
    """Wakes the waits of this process when their request's channel gets a message."""

    def __init__(self, redis: Redis, channel_of: Callable[[str], str]) -> None:
        self.redis = redis
        self.channel_of = channel_of
        self.channels: dict[str, _Channel] = {}
        self.received = 0
        self.reconnects = 0
        self.broken = False
        """The pub/sub connection is lost; the reader is reconnecting."""
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
    async def watch(self, request_id: str) -> AsyncIterator[Signal]:
        """A signal set whenever the request's channel gets a message."""
        event = await self.subscribe(request_id)
        try:
            yield event
        finally:
            await self.release(request_id, event)

    async def subscribe(self, request_id: str) -> Signal:
        """``watch`` without its context manager (a wait holds no generator frame for it):
        the request's signal, once Redis confirmed the subscription; ``release`` it."""
        name = self.channel_of(request_id)
        event = Signal()
        channel = self.channels.get(name)
        try:
            if channel is None:
                channel = self.channels[name] = _Channel()
                channel.events.add(event)
                sent = await self._send("subscribe", name)
            else:
                channel.events.add(event)
                sent = not self.broken
            if sent:
                await channel.confirmed.wait(CONFIRM_TIMEOUT)
        except BaseException:
            await self.release(request_id, event)
            raise
        return event

    async def release(self, request_id: str, event: Signal) -> None:
        """The end of a ``subscribe``: the last signal of a channel unsubscribes it."""
        name = self.channel_of(request_id)
        channel = self.channels.get(name)
        if channel is None or event not in channel.events:
            return
        channel.events.discard(event)
        if not channel.events:
            del self.channels[name]
            await self._send("unsubscribe", name)

    async def outcome(self, key: str) -> ChatStatus | None:
        """The final status stored under ``key``; None when absent or unreadable."""
        try:
            raw = await self.redis.get(key)
        except (RedisError, OSError) as exc:
            log.info("outcome %s unreadable (the status route answers): %s", key, exc)
            return None
        if raw is None:
            return None
        try:
            status = json.loads(raw)
        except ValueError:
            return None
        return cast(ChatStatus, status) if isinstance(status, dict) else None

    async def _send(self, command: str, name: str) -> bool:
        """True when Redis took the command; while broken, nothing is sent (the reader
        subscribes every open channel once it reconnects)."""
        if self.broken:
            return False
        try:
            async with self._commands:
                await getattr(self._pubsub, command)(name)
        except (RedisError, OSError) as exc:
            log.warning("signal %s %s failed (the fallback poll covers it): %s", command, name, exc)
            self._lost()
            return False
        self._wake.set()
        return True

    def _lost(self) -> None:
        self.broken = True
        self._wake.set()

    async def _read_forever(self) -> None:
        delay = RECONNECT_DELAY
        while True:
            try:
                if self.broken:
                    await self._resubscribe()
                    self.broken = False
                    self.reconnects += 1
                    delay = RECONNECT_DELAY
                    log.info("signal connection restored (%d channels)", len(self.channels))
                    self._wake_all()
                    continue
                if not self._pubsub.subscribed:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                message = await self._pubsub.get_message(timeout=None)
                if message is not None:
                    self._dispatch(message)
            except (RedisError, OSError) as exc:
                if not self.broken:
                    log.warning("signal connection lost, reconnecting: %s", exc)
                self.broken = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX)

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
            outcome = _outcome_of(message.get("data"))
            for event in channel.events:
                if outcome is not None:
                    event.outcome = outcome
                event.set()

    async def _resubscribe(self) -> None:
        """A new PubSub subscribed to every open channel; raises while Redis is away."""
        async with self._commands:
            with contextlib.suppress(RedisError, OSError):
                await self._pubsub.aclose()
            self._pubsub = self.redis.pubsub()
            names = list(self.channels)
            if names:
                await self._pubsub.subscribe(*names)
            else:
                await self.redis.ping()

    def _wake_all(self) -> None:
        for channel in self.channels.values():
            channel.confirmed.set()
            for event in channel.events:
                event.set()


def _outcome_of(data: Any) -> str | None:
    """The outcome key an event names, if it names one."""
    if not isinstance(data, str | bytes):
        return None
    try:
        event = parse_chat_event(data)
    except ValueError:
        return None
    key = event.get(CHAT_FIELD_OUTCOME)
    return key if isinstance(key, str) else None
