"""A service process's heap, settled once the service has started.

CPython's full (generation 2) collection walks every object the collector tracks, and the
process waits meanwhile. Most of a service's objects are made while it starts (modules,
classes, the ORM's and the wire models' tables, compiled statements, its clients) and live
as long as the process, yet a full collection walks them all again: ~150,000 objects,
40-150 ms on the 2-core machine the benches run on (bench/gc_pause.py), a stall that a
request in a few thousand meets.

``settle`` collects once, then moves every object left into the collector's permanent
generation (``gc.freeze``), which no later collection walks: a full collection then walks
only what was allocated since. Objects in the permanent generation are freed by reference
counting as before; only a cycle among them is never collected (a startup object that
later joins a reference cycle stays). The service commands call it once their service
serves (``runtime.launcher``, ``horde-chat worker``); a library user, a test, never does.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send


def settle() -> None:
    """Collect, then exempt every object left from all later collections (see above)."""
    gc.collect()
    gc.freeze()


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
