"""SIGINT, SIGTERM and SIGHUP stop a service command: ``with stop_on_signals(stop): ...``.

The signal handler only writes a byte to a pipe; a thread reads it and sets the event
(``stop_on_signals`` says why). SIGHUP (the terminal closed) stops gracefully too, unless
the process ignores it (``nohup``): its default action would orphan the embedded stores and
the demo's llama server, and leave a worker's jobs to the native API's timeout.
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
    to set.

    The handler must not set ``stop`` itself: Python runs it between any two bytecodes of
    the main thread, and ``Event.set`` takes a non-reentrant lock, so a second signal landing
    inside the first handler's ``set`` waits forever on its own thread's lock (``up`` hung
    so, four handlers deep). It writes a byte to a non-blocking pipe, which takes no lock and
    never waits (a full pipe already holds a stop); the relay thread sets the event."""
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
