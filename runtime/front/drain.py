"""The front's graceful shutdown: what a stopping front does with the requests it holds.

On stop the server takes no new connections and ``Drain.begin()`` runs: a request not yet
submitted is refused 503 front_shutting_down (nothing queued, so it can go to another
front); submitted ones wait up to ``grace`` seconds, then are cancelled on the native API
(nothing charged for a reply nobody receives) and answered front_shutting_down, never a
dropped connection. The server's own graceful timeout covers that (``server_timeout``).
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from generated.errors import FrontShuttingDown
from runtime.stop_signals import STOP_SIGNALS

CANCEL_ALLOWANCE = 7.0
"""Seconds past the grace a stopping server keeps its connections: a cancel's inline wait
(runtime.front.app.CANCEL_INLINE_WAIT, 5) and the error answers."""


def server_timeout(grace: float) -> float:
    """uvicorn's timeout_graceful_shutdown for a front with this shutdown grace."""
    return grace + CANCEL_ALLOWANCE


class Drain:
    """One front app's shutdown state; ``begin`` is idempotent."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.started = False
        self.over = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._at_end: set[Callable[[], None]] = set()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the app serves on (set by the lifespan)."""
        self.loop = loop

    def begin(self) -> None:
        """On the app's loop: stop taking new requests; the grace starts now."""
        if self.started:
            return
        self.started = True
        self._timer = asyncio.get_running_loop().call_later(self.grace, self._end)

    def _end(self) -> None:
        self.over.set()
        for callback in list(self._at_end):
            callback()

    def at_end(self, callback: Callable[[], None]) -> None:
        """``callback`` runs (on the loop) when the grace ends, unless ``forget`` first: a
        waiting request is told without a task of its own waiting on ``over``."""
        self._at_end.add(callback)

    def forget(self, callback: Callable[[], None]) -> None:
        self._at_end.discard(callback)

    def begin_threadsafe(self) -> None:
        """From another thread (or a signal handler): ``begin`` on the app's loop."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.begin)

    def refuse_if_started(self) -> None:
        """Raise front_shutting_down for a request not submitted yet once stopping."""
        if self.started:
            raise FrontShuttingDown(detail="the request was not submitted; send it again")

    def expired(self) -> FrontShuttingDown:
        """The error a submitted request still waiting at the end of the grace gets."""
        return FrontShuttingDown(
            detail=f"no reply within its {self.grace:g} s shutdown grace; the request was cancelled"
        )

    def chain_signals(self) -> Callable[[], None]:
        """On the main thread: SIGINT and SIGTERM call ``begin`` before the server's own
        handler. Returns what restores the previous handlers (a no-op off the main thread).
        Called from the lifespan of a ``--processes N`` server process, where the signal
        reaches uvicorn's handler; in one process the service calls ``begin_threadsafe``."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous: dict[int, Any] = {}

        def handler(sig: int, frame: FrameType | None) -> None:
            self.begin_threadsafe()
            before = previous.get(sig)
            if callable(before):
                before(sig, frame)

        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, handler)

        def restore() -> None:
            for sig, before in previous.items():
                if signal.getsignal(sig) is handler:
                    signal.signal(sig, before)

        return restore
