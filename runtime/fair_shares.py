"""A small thread pool shared fairly between sources (the image fetches, the webhooks).

Each piece of work names its sources (a requester, a host); each source may have
``running_per_source`` pieces running and ``queued_per_source`` more waiting. A free thread
takes the waiting piece whose busiest source runs fewest (oldest first among equals), never
one whose source is at its running share, so hanging work holds only its source's share.
Past a source's whole share ``submit`` raises ShareFull, past the pool's places PoolFull.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


class ShareFull(Exception):
    """``source`` already holds its whole share (``held`` of ``limit``, running and waiting)."""

    def __init__(self, source: str, held: int, limit: int) -> None:
        super().__init__(f"{source} holds {held} of its share of {limit}")
        self.source = source
        self.held = held
        self.limit = limit


class PoolFull(Exception):
    """Every place of the pool, running and waiting, is taken."""


@dataclass
class _Piece:
    sources: tuple[str, ...]
    work: Callable[[], Any]
    future: Future[Any]
    order: int = field(default=0)


class FairPool:
    """``workers`` daemon threads (started on first use) behind one fair waiting list."""

    def __init__(
        self,
        name: str,
        *,
        workers: int,
        queued: int,
        running_per_source: int,
        queued_per_source: int,
    ) -> None:
        self.name = name
        self.workers = workers
        self.queued = queued
        self.running_per_source = running_per_source
        self.share = running_per_source + queued_per_source
        self._cond = threading.Condition()
        self._waiting: list[_Piece] = []
        self._running: Counter[str] = Counter()
        self._held: Counter[str] = Counter()
        self._busy = 0
        self._threads: list[threading.Thread] = []
        self._order = itertools.count()

    def submit(self, sources: Sequence[str], work: Callable[[], T]) -> Future[T]:
        """Queue ``work`` for its ``sources``; ShareFull or PoolFull at once when no place."""
        piece = _Piece(tuple(dict.fromkeys(sources)), work, Future())
        with self._cond:
            for source in piece.sources:
                if self._held[source] >= self.share:
                    raise ShareFull(source, self._held[source], self.share)
            if self._busy + len(self._waiting) >= self.workers + self.queued:
                raise PoolFull()
            piece.order = next(self._order)
            self._waiting.append(piece)
            self._held.update(piece.sources)
            self._start_threads()
            self._cond.notify_all()
        return piece.future

    def held(self, source: str) -> int:
        """Pieces of ``source`` running or waiting now."""
        with self._cond:
            return self._held[source]

    def pieces(self) -> int:
        """Pieces running or waiting now."""
        with self._cond:
            return self._busy + len(self._waiting)

    def join(self) -> None:
        """Wait until nothing runs or waits (tests)."""
        with self._cond:
            self._cond.wait_for(lambda: not self._busy and not self._waiting)

    def _start_threads(self) -> None:
        self._threads = [thread for thread in self._threads if thread.is_alive()]
        while len(self._threads) < self.workers:
            thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def _next(self) -> _Piece | None:
        """The waiting piece to run next (lock held), or None when none may."""
        eligible = [
            piece
            for piece in self._waiting
            if all(self._running[source] < self.running_per_source for source in piece.sources)
        ]
        if not eligible:
            return None
        return min(
            eligible,
            key=lambda piece: (max(self._running[s] for s in piece.sources), piece.order),
        )

    def _run(self) -> None:
        while True:
            with self._cond:
                piece = self._cond.wait_for(self._next)
                assert piece is not None
                self._waiting.remove(piece)
                self._running.update(piece.sources)
                self._busy += 1
            try:
                if piece.future.set_running_or_notify_cancel():
                    try:
                        piece.future.set_result(piece.work())
                    except BaseException as exc:  # noqa: BLE001 - the caller's, as an executor's
                        piece.future.set_exception(exc)
            finally:
                with self._cond:
                    for source in piece.sources:  # a source with nothing left is forgotten
                        _drop(self._running, source)
                        _drop(self._held, source)
                    self._busy -= 1
                    self._cond.notify_all()


def _drop(counts: Counter[str], source: str) -> None:
    counts[source] -= 1
    if counts[source] <= 0:
        del counts[source]
