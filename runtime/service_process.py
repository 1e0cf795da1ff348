"""A service process, settled once its service has started: its heap and its GIL switch interval.

``settle`` collects once and freezes what is left (``gc.freeze``), so a full collection no
longer walks the ~150,000 objects made while starting; and it shortens the GIL's switch
interval (``SWITCH_INTERVAL``), because our threads answer in steps of tenths of a
millisecond. Figures: docs/performance.md. The service commands call it once their service
serves (``serve_until``); a library user or a test never does.
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
    switch interval (see above). Frozen objects are still freed by reference counting;
    only a cycle among them (a startup object that later joins one) is never collected."""
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
