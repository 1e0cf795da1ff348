"""runtime.service_process: a settled heap leaves what it held out of every later collection,
collects what comes after; a settled process hands the GIL over at SWITCH_INTERVAL; a spawned
server process's app settles once its startup completed."""

from __future__ import annotations

import asyncio
import gc
import sys
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.types import Message

import runtime.service_process
from runtime.service_process import SWITCH_INTERVAL, settle, settled_after_startup


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The test process as it was: what ``settle`` froze goes back to the collector, the
    switch interval back to what it was."""
    interval = sys.getswitchinterval()
    try:
        yield
    finally:
        gc.unfreeze()
        sys.setswitchinterval(interval)


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def tracked(obj: object) -> bool:
    """Whether a collection would walk ``obj`` (the permanent generation is in none)."""
    return any(o is obj for o in gc.get_objects())


@pytest.mark.usefixtures("unfrozen")
def test_a_settled_process_hands_the_gil_over_sooner() -> None:
    assert sys.getswitchinterval() > SWITCH_INTERVAL  # CPython's 5 ms in the test process
    settle()
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL)


@pytest.mark.usefixtures("unfrozen")
def test_a_settled_heap_is_out_of_later_collections() -> None:
    started_with = [Node() for _ in range(1000)]  # what a service built while it started
    assert tracked(started_with)
    settle()
    assert not tracked(started_with)
    assert gc.get_freeze_count() >= len(started_with)


@pytest.mark.usefixtures("unfrozen")
def test_garbage_made_after_settling_is_still_collected() -> None:
    settle()
    first, second = Node(), Node()
    first.other, second.other = second, first  # a cycle: reference counting alone keeps it
    gone = weakref.ref(first)
    del first, second
    gc.collect()
    assert gone() is None


async def lifespan_app(scope: Any, receive: Any, send: Any) -> None:
    """An app that starts and stops (and answers any HTTP request 204)."""
    if scope["type"] == "lifespan":
        await receive()
        await send({"type": "lifespan.startup.complete"})
        await receive()
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def test_a_spawned_server_settles_once_its_startup_completed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[str] = []
    monkeypatch.setattr(runtime.service_process, "settle", lambda: events.append("settled"))

    async def recorded(message: Message) -> None:
        events.append(str(message["type"]))

    async def serve() -> None:
        inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

        async def receive() -> Message:
            return inbox.pop(0)

        app = settled_after_startup(lifespan_app)
        await app({"type": "lifespan"}, receive, recorded)
        await app({"type": "http"}, receive, recorded)  # a request settles nothing

    asyncio.run(serve())
    assert events == [
        "lifespan.startup.complete",
        "settled",
        "lifespan.shutdown.complete",
        "http.response.start",
        "http.response.body",
    ]
