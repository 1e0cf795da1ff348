"""Parse work shared fairly between client addresses (start-time fair queuing).

The parser processes take a few bodies at a time (``slots``); the others wait here, each
tagged with the bytes its address had parsed before it (its start tag: the later of the
address's own last finish and the tags now in service). The next body to go is the one
with the smallest tag, so an address flooding bodies waits behind its own, and another's
body waits behind about one of each busy address's, not behind the flood's whole queue.
Bodies of one address keep their order. One per event loop: a front process's app.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

FORGET_AFTER = 4096
"""Addresses remembered at most (their last finish); the idle ones are forgotten beyond."""


class FairShare:
    """Turns at a bounded resource, given fairly by bytes per address."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.busy = 0
        self.clock = 0
        """The start tag of the body that went last."""
        self.finish: dict[str, int] = {}
        """Each address's finish tag: its start tag plus the bytes of its bodies so far."""
        self.waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    @asynccontextmanager
    async def turn(self, source: str, size: int) -> AsyncIterator[None]:
        """Hold one of the slots for a body of ``size`` bytes from ``source``."""
        start = max(self.clock, self.finish.get(source, 0))
        self.finish[source] = start + max(size, 1)
        if self.busy < self.slots and not self.waiting:
            self.busy += 1
            self.clock = start
        else:
            ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self.waiting, (start, next(self._order), ready))
            try:
                await ready
            except asyncio.CancelledError:
                if ready.done() and not ready.cancelled():
                    self._release()  # given the turn as the waiter was cancelled: pass it on
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        self.busy -= 1
        while self.waiting:
            start, _order, ready = heapq.heappop(self.waiting)
            if ready.cancelled():
                continue
            self.busy += 1
            self.clock = start
            ready.set_result(None)
            break
        if len(self.finish) > FORGET_AFTER:
            self.finish = {s: f for s, f in self.finish.items() if f > self.clock}
