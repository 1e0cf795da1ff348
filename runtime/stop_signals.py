"""SIGINT and SIGTERM stop a service command: ``with stop_on_signals(stop): ...``.

A service command's main thread waits on a ``threading.Event`` that a signal sets. The
signal's handler must not set it itself. Python runs a handler in the main thread between two
bytecodes, wherever that thread is, and ``Event.set`` takes the event's lock, a
``threading.Lock``, which is not reentrant. A second signal (Ctrl-C pressed twice, or an
operator's SIGTERM after a Ctrl-C) that lands while the first handler is inside ``set`` runs a
second handler that waits for the lock its own thread holds: the command never stops. It
happened: ``horde-chat up`` hung so on 2026-12-05, every thread idle, the main thread's stack
four handlers deep in ``Event.set``.

So the handler only writes a byte to a pipe, which takes no lock (and, non-blocking, never
waits: a full pipe already holds a stop), and a thread of its own reads the pipe and sets the
event.

SIGHUP (the command's terminal was closed) stops it the same way, where the platform has
one. Its default action ends the process at once, with no cleanup: ``horde-chat up`` left
its embedded Postgres and Redis and the demo's llama-cpp-python server running, orphaned; a
worker would leave the jobs it holds to the native API's timeout instead of faulting them.
None of the commands reloads anything on SIGHUP, so a graceful stop is what they all want.
Unless the process ignores SIGHUP (started under ``nohup``: it is meant to outlive its
terminal).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[threading.Event]:
    """SIGINT, SIGTERM and SIGHUP (unless ignored) set ``stop`` while the block runs; the
    previous handlers come back after it. Off the main thread (a test, a library user) no
    handler is installed: only the main thread may install one, and ``stop`` is then theirs
    to set."""
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    signals = list(STOP_SIGNALS)
    hangup = getattr(signal, "SIGHUP", None)  # none on Windows, where the worker may run
    if hangup is not None and signal.getsignal(hangup) is not signal.SIG_IGN:
        signals.append(hangup)
    read_end, write_end = os.pipe()
    if hasattr(os, "set_blocking"):  # POSIX; on Windows (the worker) a write may block instead
        os.set_blocking(write_end, False)

    def noted(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(BlockingIOError):  # the pipe is full: a stop is on its way
            os.write(write_end, b"\0")

    def relay() -> None:
        while os.read(read_end, 512):  # read until the block ends and closes the pipe
            stop.set()  # each signal's byte is read: the pipe never fills

    relaying = threading.Thread(target=relay, name="stop-signals", daemon=True)
    relaying.start()
    previous = {sig: signal.signal(sig, noted) for sig in signals}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(write_end)
        relaying.join()
        os.close(read_end)
