"""A service process, settled once its service has started: its heap, and how long a thread
holds the GIL while another waits for it.

**The heap.** CPython's full (generation 2) collection walks every object the collector
tracks, and the process waits meanwhile. Most of a service's objects are made while it starts
(modules, classes, the ORM's and the wire models' tables, compiled statements, its clients)
and live as long as the process, yet a full collection walks them all again: ~150,000
objects, 40-150 ms on the 2-core machine the benches run on (bench/gc_pause.py), a stall that
a request in a few thousand meets. ``settle`` collects once, then moves every object left
into the collector's permanent generation (``gc.freeze``), which no later collection walks:
a full collection then walks only what was allocated since. Objects in the permanent
generation are freed by reference counting as before; only a cycle among them is never
collected (a startup object that later joins a reference cycle stays).

**The GIL's switch interval.** A service runs several threads in one interpreter: each
server's event loop, the native API's lane and WSGI threads, the worker's loop, and under
``horde-chat up`` all of these at once. A thread that becomes ready (a reply arrived) while
another runs Python waits for the GIL until the other blocks on I/O or its switch interval
runs out: 5 ms by CPython's default, tuned for threads that compute. Ours answer requests
in steps of a few tenths of a millisecond, so ``settle`` shortens the interval to
``SWITCH_INTERVAL``. Measured with ``horde-chat up`` and the openai SDK, 80-100 plain
completions at 0.6 s intervals, in A B pairs (2026-12-05, idle 2-core VM):
- the interval set by hand around an unchanged ``up``: the client's p50 34.2 / 32.6 / 34.7 /
  33.6 ms at 5 ms, 32.7 / 31.3 / 31.7 / 30.2 ms at 1 ms;
- then the tree before and after ``settle`` set it: p50 37.7 / 31.0 -> 35.2 / 28.7 ms, p90
  44.7 / 40.0 -> 40.7 / 36.2 ms, p99 52.5 / 51.5 -> 48.1 / 42.4 ms.
The front and the native API each in its own process (bench/front.py, the same trees, A B A
B): front_added_p50_ms 3.10 / 3.33 -> 2.47 / 2.85 ms, for more CPU in the front
(front_cpu_per_request_ms 3.10 / 2.97 -> 3.27 / 3.30 ms: more hand-overs); delivery p50 / p99
7.83 / 11.42 and 7.00 / 9.82 -> 7.89 / 10.88 and 8.10 / 11.24 ms, no change the noise lets
through.

The service commands call ``settle`` once their service serves (``serve_until``, which
``horde-chat native``, ``front`` and ``python -m runtime.front`` run; ``horde-chat up`` and
``horde-chat worker`` call it themselves); a library user, a test, never does.
"""

from __future__ import annotations

import gc
import sys
import threading
from typing import TYPE_CHECKING, Protocol, TextIO

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send


class Service(Protocol):
    """A started service, as a command runs it."""

    def describe(self) -> str: ...

    def stop(self) -> None: ...


SWITCH_INTERVAL = 0.001
"""Seconds a thread runs Python before one waiting for the GIL takes it (CPython's: 0.005)."""


def settle() -> None:
    """Collect, then exempt every object left from all later collections; shorten the GIL's
    switch interval (see above)."""
    gc.collect()
    gc.freeze()
    sys.setswitchinterval(SWITCH_INTERVAL)


def settled_after_startup(app: ASGIApp) -> ASGIApp:
    """``app`` that settles its process's heap once its lifespan startup completed: for the
    server processes a supervisor spawns (``--processes N``), which build their app from a
    factory and have no command of their own to call ``settle``."""

    async def settled(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return

        async def sent(message: Message) -> None:
            await send(message)
            if message["type"] == "lifespan.startup.complete":
                settle()

        await app(scope, receive, sent)

    return settled


def serve_until(stop: threading.Event, service: Service, out: TextIO) -> int:
    """Settle the process, say where ``service`` listens, serve until ``stop`` is set, then
    stop it."""
    try:
        settle()
        print(service.describe(), file=out, flush=True)
        stop.wait()
    finally:
        service.stop()
    return 0
