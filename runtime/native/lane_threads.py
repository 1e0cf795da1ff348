"""The threads the workers' lane runs its views on, one hop from the event loop and back.

``loop.run_in_executor`` chains a ``concurrent.futures.Future`` to an asyncio one; here a
call is one queue put and its answer one ``call_soon_threadsafe``, about a third of the
CPU a hop (docs/performance.md). Threads start as calls find none idle, up to ``size``, as
``ThreadPoolExecutor``'s do.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Call = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class LaneThreads:
    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self.name = name
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def call(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` on one of the threads; its result (or exception) is the future's."""
        if self._closed:
            raise RuntimeError("the lane's threads are shut down")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put((loop, future, fn, args))
        if not self._idle.acquire(blocking=False):
            self._start_one()
        return future

    def shutdown(self) -> None:
        """No new calls; each thread ends once the calls queued before are run."""
        with self._lock:
            self._closed = True
            for _ in self._threads:
                self._calls.put(None)

    def _start_one(self) -> None:
        with self._lock:
            if self._closed or len(self._threads) >= self.size:
                return
            thread = threading.Thread(
                target=self._run, name=f"{self.name}_{len(self._threads)}", daemon=True
            )
            self._threads.append(thread)
        thread.start()

    def _run(self) -> None:
        while (call := self._calls.get()) is not None:
            _run_one(*call)
            del call  # an idle thread holds nothing of the call it ran
            self._idle.release()


def _run_one(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    fn: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    try:
        result = fn(*args)
    except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine, as an executor's
        _hand(loop, _fail, future, exc)
    else:
        _hand(loop, _settle, future, result)


def _hand(loop: asyncio.AbstractEventLoop, settle: Callable[..., None], *args: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody awaits it
        loop.call_soon_threadsafe(settle, *args)


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # cancelled meanwhile (the client left, or shutdown)
        future.set_result(result)


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
