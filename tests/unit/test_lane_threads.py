"""runtime.native.lane_threads: the lane's views run on its threads, their answers (or
exceptions) reach the awaiting coroutine, and the threads stay within their bound."""

from __future__ import annotations

import asyncio
import threading

import pytest

from runtime.native.lane_threads import LaneThreads


def test_a_call_runs_on_a_lane_thread_and_returns_its_result() -> None:
    threads = LaneThreads(2, "t-lane")

    async def main() -> tuple[int, str]:
        return await threads.call(lambda a, b: (a + b, threading.current_thread().name), 2, 3)

    total, name = asyncio.run(main())
    threads.shutdown()
    assert total == 5
    assert name.startswith("t-lane_")


def test_an_exception_reaches_the_caller() -> None:
    threads = LaneThreads(1, "t-lane")

    def fails() -> None:
        raise ValueError("refused")

    async def main() -> None:
        await threads.call(fails)

    with pytest.raises(ValueError, match="refused"):
        asyncio.run(main())
    threads.shutdown()


def test_calls_beyond_the_bound_wait_for_a_thread() -> None:
    threads = LaneThreads(3, "t-lane")
    running = 0
    peak = 0
    lock = threading.Lock()
    release = threading.Event()

    def hold(i: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        release.wait(5)
        with lock:
            running -= 1
        return i

    async def main() -> list[int]:
        calls = [asyncio.ensure_future(threads.call(hold, i)) for i in range(10)]
        deadline = asyncio.get_running_loop().time() + 30
        while running < 3:  # every thread holds a call; the other seven wait for one
            assert asyncio.get_running_loop().time() < deadline, "the threads never filled"
            await asyncio.sleep(0.01)
        release.set()
        return list(await asyncio.gather(*calls))

    assert asyncio.run(main()) == list(range(10))
    threads.shutdown()
    assert peak == 3
    assert len(threads._threads) == 3


def test_a_cancelled_wait_leaves_the_thread_free() -> None:
    threads = LaneThreads(1, "t-lane")
    started = threading.Event()
    release = threading.Event()

    def slow() -> str:
        started.set()
        release.wait(5)
        return "late"

    async def main() -> str:
        waiting = threads.call(slow)
        await asyncio.to_thread(started.wait, 5)
        waiting.cancel()  # the client left: the answer, when it comes, goes nowhere
        release.set()
        return await threads.call(lambda: "next")

    assert asyncio.run(main()) == "next"
    threads.shutdown()


def test_no_call_after_shutdown() -> None:
    threads = LaneThreads(1, "t-lane")
    threads.shutdown()

    async def main() -> None:
        await threads.call(lambda: None)

    with pytest.raises(RuntimeError, match="shut down"):
        asyncio.run(main())
