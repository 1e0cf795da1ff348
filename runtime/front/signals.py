"""Completion signals: one Redis pattern subscription for every open wait.

The hub's one PSUBSCRIBE (``channel_of("*")``) hears every request's channel, so opening and
closing a wait sends Redis nothing (a subscription per wait cost two round trips and three
of the front's wakes a request); the price is that every front reads every request's few
small events. Recent messages are kept for waits that open after a fast worker's first
event (``mark``). Redis failing fails no wait: the hub reconnects and wakes every wait once,
and waits also poll slowly (``SignalHub``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from generated.signals import CHAT_FIELD_OUTCOME, CHAT_SIGNALS
from generated.wire.native import ChatStatus

log = logging.getLogger(__name__)

CONFIRM_TIMEOUT = 2.0
"""How long a wait opened while the hub connects waits for it to listen."""
RECENT = 1024
"""Messages of channels no open wait holds, kept for waits about to open (a submit's
answer and its first event race: either may reach the front first)."""
RECONNECT_DELAY = 0.5
"""The first pause before reconnecting (doubled after each failure, up to RECONNECT_MAX)."""
RECONNECT_MAX = 4.0


class Flag:
    """asyncio.Event's set / clear / is_set / wait, with a timeout of its own and no deque.

    An open wait holds its Signal and its client's disconnect flag until it ends: as
    asyncio.Events they were a measurable share of a wait's memory (each allocates a deque
    of its waiters and a dict; docs/performance.md), and a timed wait took asyncio.wait_for,
    a Task wrapping ``wait()``. Here the waiters are a list made on the first wait, and
    ``wait(timeout)`` is one future and one timer in the caller's own task."""

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

    __slots__ = ("heard", "outcome")

    def __init__(self) -> None:
        super().__init__()
        self.outcome: str | None = None
        self.heard = False
        """Set by ``subscribe``: no message since the submit can have been missed."""


class Mark(NamedTuple):
    """Where the hub stood when a submit was sent (``SignalHub.mark``): its connection's
    epoch and the number of messages it had read."""

    epoch: int
    seq: int


class SignalHub:
    """Wakes the waits of this process when their request's channel gets a message.

    A reader task sets the open wait's signal, noting the outcome key the event names. A
    wait's first event can beat its submit's answer, so the last ``RECENT`` messages of
    channels no wait holds are kept, and a wait opened with a ``mark`` gets what came
    meanwhile; ``heard`` says none can have been missed. A lost or refused connection marks
    the hub broken: waits open without waiting and are not ``heard``, and the reader
    reconnects with a growing pause, then wakes every open wait once."""

    def __init__(self, redis: Redis, channel_of: Callable[[str], str]) -> None:
        self.redis = redis
        self.channel_of = channel_of
        self.pattern = channel_of("*")
        """Every request's channel: the hub's one pattern subscription."""
        self.channels: dict[str, set[Signal]] = {}
        """The open waits' signals, by their channel."""
        self.received = 0
        """Messages read (their sequence numbers)."""
        self.reconnects = 0
        self.broken = False
        """The pub/sub connection is lost; the reader is reconnecting."""
        self.listening = Flag()
        """Redis confirmed the pattern subscription on the current connection."""
        self.epoch = 0
        """The current connection's number (a message read on an earlier one is another's)."""
        self._recent: dict[str, tuple[int, str | None]] = {}
        """Channels with no open wait that got a message: the latest's sequence number and
        the outcome key the latest naming one named (a wait opened right after its submit
        finds there what arrived meanwhile)."""
        self._recent_order: collections.deque[tuple[int, str]] = collections.deque()
        self._forgotten = 0
        """The newest sequence number dropped from ``_recent``."""
        self._outage_logged = False
        self._pubsub: Any = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Starts the reader, which connects and subscribes (a front starts without Redis)."""
        self._reader = asyncio.create_task(self._read_forever(), name="front-signals")

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._pubsub is not None:
            with contextlib.suppress(RedisError, OSError):
                await self._pubsub.aclose()

    def mark(self) -> Mark | None:
        """Taken before a submit is sent: ``subscribe(request_id, mark)`` then holds every
        message of the request's channel, those read meanwhile included, when the hub
        listened throughout. None while it does not listen."""
        if not self.listening.is_set():
            return None
        return Mark(self.epoch, self.received)

    @contextlib.asynccontextmanager
    async def watch(self, request_id: str) -> AsyncIterator[Signal]:
        """A signal set whenever the request's channel gets a message."""
        event = await self.subscribe(request_id)
        try:
            yield event
        finally:
            self.release(request_id, event)

    async def subscribe(self, request_id: str, since: Mark | None = None) -> Signal:
        """The request's signal (``release`` it): set for every message its channel gets
        from here on, while Redis answers (on a hub still connecting, once it listens, or
        after ``CONFIRM_TIMEOUT``). Its ``heard`` is True when no message since ``since``
        can have been missed: those read meanwhile have set it already."""
        name = self.channel_of(request_id)
        event = Signal()
        events = self.channels.get(name)
        fresh = events is None
        if events is None:
            events = self.channels[name] = set()
        events.add(event)
        if not self.listening.is_set() and not self.broken:
            try:
                await self.listening.wait(CONFIRM_TIMEOUT)
            except BaseException:
                self.release(request_id, event)
                raise
        if fresh and since is not None and self._heard_since(since):
            event.heard = True
            seen = self._recent.get(name)
            if seen is not None and seen[0] > since.seq:
                event.outcome = seen[1]
                event.set()
        return event

    def _heard_since(self, since: Mark) -> bool:
        """Every message read since ``since`` either reached an open wait or is in
        ``_recent``: the same connection listened throughout and nothing was dropped."""
        return (
            self.listening.is_set() and self.epoch == since.epoch and self._forgotten <= since.seq
        )

    def release(self, request_id: str, event: Signal) -> None:
        """The end of a ``subscribe``."""
        name = self.channel_of(request_id)
        events = self.channels.get(name)
        if events is None or event not in events:
            return
        events.discard(event)
        if not events:
            del self.channels[name]

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

    async def _read_forever(self) -> None:
        delay = RECONNECT_DELAY
        while True:
            try:
                if self._pubsub is None or self.broken:
                    await self._connect()
                    self.broken = False  # waits opened now wait for the confirmation
                    delay = RECONNECT_DELAY
                    continue
                message = await self._pubsub.get_message(timeout=None)
                if message is not None:
                    self._dispatch(message)
            except (RedisError, OSError) as exc:
                if not self._outage_logged:
                    log.warning("signal connection lost or refused, reconnecting: %s", exc)
                    self._outage_logged = True
                self.broken = True
                self.listening.clear()
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX)

    async def _connect(self) -> None:
        """A new PubSub with the pattern subscription sent; raises while Redis is away. Its
        confirmation, when read, makes the hub listen."""
        if self._pubsub is not None:
            with contextlib.suppress(RedisError, OSError):
                await self._pubsub.aclose()
        self._pubsub = self.redis.pubsub()
        await self._pubsub.psubscribe(self.pattern)

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "psubscribe":
            self._listen()
            return
        if kind != "pmessage":
            return
        self.received += 1
        name = message.get("channel")
        if isinstance(name, bytes):
            name = name.decode()
        if not isinstance(name, str):
            return
        outcome = _outcome_of(message.get("data"))
        events = self.channels.get(name)
        if events is None:
            self._remember(name, outcome)
            return
        for event in events:
            if outcome is not None:
                event.outcome = outcome
            event.set()

    def _remember(self, name: str, outcome: str | None) -> None:
        """A message no open wait holds, kept for a wait about to open (the last
        ``RECENT`` of them)."""
        seen = self._recent.get(name)
        if outcome is None and seen is not None:
            outcome = seen[1]
        self._recent[name] = (self.received, outcome)
        self._recent_order.append((self.received, name))
        while len(self._recent_order) > RECENT:
            seq, old = self._recent_order.popleft()
            self._forgotten = seq
            if self._recent.get(old, (None,))[0] == seq:
                del self._recent[old]

    def _listen(self) -> None:
        """Redis confirmed the pattern subscription: a new epoch. Every open wait is woken
        once when it is not the first, since messages may have been lost meanwhile."""
        self.epoch += 1
        self._outage_logged = False
        self._recent.clear()
        self._recent_order.clear()
        if self.epoch > 1:
            self.reconnects += 1
            log.info("signal connection restored (%d channels)", len(self.channels))
            for events in self.channels.values():
                for event in events:
                    event.set()
        self.listening.set()


def _outcome_of(data: Any) -> str | None:
    """The outcome key an event names, if it names one."""
    if not isinstance(data, str | bytes):
        return None
    try:
        event = CHAT_SIGNALS.parse(data)
    except ValueError:
        return None
    key = event.get(CHAT_FIELD_OUTCOME)
    return key if isinstance(key, str) else None
