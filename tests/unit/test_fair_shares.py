"""The fair pool of the image fetches and the webhooks (runtime.fair_shares): a source at
its running share waits behind nobody else's work, past its whole share it is refused at
once, and a freed thread goes to the source running fewest."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from runtime.fair_shares import FairPool, PoolFull, ShareFull
from tests.support.waiting import until


class Gate:
    """Work that records its start and holds until released."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self._released: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def work(self, name: str) -> Callable[[], str]:
        event = self._released.setdefault(name, threading.Event())

        def held() -> str:
            with self._lock:
                self.started.append(name)
            event.wait(30)
            return name

        return held

    def release(self, name: str) -> None:
        self._released[name].set()

    def release_all(self) -> None:
        for event in self._released.values():
            event.set()


@pytest.fixture
def gate() -> Iterator[Gate]:
    held = Gate()
    yield held
    held.release_all()


def _pool(workers: int = 4, queued: int = 8) -> FairPool:
    return FairPool(
        "test-pool", workers=workers, queued=queued, running_per_source=2, queued_per_source=2
    )


def test_a_source_at_its_running_share_leaves_the_other_threads_to_others(gate: Gate) -> None:
    pool = _pool()
    hog = [pool.submit(["hog"], gate.work(f"hog{i}")) for i in range(4)]
    until(lambda: len(gate.started) == 2, "the hog's running share started")
    other = pool.submit(["other"], lambda: "served")
    assert other.result(30) == "served"  # while every hog piece is still held
    assert gate.started == ["hog0", "hog1"]
    assert not any(future.done() for future in hog)


def test_past_its_whole_share_a_source_is_refused_at_once_and_others_are_not(
    gate: Gate,
) -> None:
    pool = _pool()
    for i in range(4):  # 2 running, 2 waiting
        pool.submit(["hog"], gate.work(f"hog{i}"))
    with pytest.raises(ShareFull) as refused:
        pool.submit(["hog"], gate.work("hog4"))
    assert (refused.value.source, refused.value.held, refused.value.limit) == ("hog", 4, 4)
    with pytest.raises(ShareFull):  # a piece is refused when any of its sources is full
        pool.submit(["other", "hog"], gate.work("both"))
    assert pool.submit(["other"], lambda: "served").result(30) == "served"


def test_a_freed_thread_goes_to_the_source_running_fewest(gate: Gate) -> None:
    pool = _pool(workers=2)
    for i in range(4):
        pool.submit(["hog"], gate.work(f"hog{i}"))
    until(lambda: len(gate.started) == 2, "both threads taken by the hog")
    other = pool.submit(["other"], gate.work("other"))
    gate.release("hog0")
    until(lambda: len(gate.started) == 3, "the freed thread taken")
    assert gate.started[2] == "other"  # not the hog's older waiting piece
    gate.release("other")
    assert other.result(30) == "other"


def test_the_pool_refuses_past_its_places_and_forgets_idle_sources(gate: Gate) -> None:
    pool = _pool(workers=1, queued=1)
    pool.submit(["a"], gate.work("a"))
    pool.submit(["b"], gate.work("b"))
    with pytest.raises(PoolFull):
        pool.submit(["c"], gate.work("c"))
    gate.release_all()
    pool.join()
    assert pool.held("a") == pool.held("b") == 0
    assert not pool._held  # nothing kept for sources gone
    assert not pool._running
