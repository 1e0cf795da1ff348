"""SIGINT, SIGTERM and SIGHUP stop a service command: ``with stop_on_signals(stop): ...``.

A signal's byte reaches a pipe, and a thread reads it and sets the event (``stop_on_signals``
says why and how). SIGHUP (the terminal closed) stops gracefully too, unless
the process ignores it (``nohup``): its default action would orphan the embedded stores and
the demo's llama server, and leave a worker's jobs to the native API's timeout.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
NOTED = 0
"""The byte the Python-level handler writes (no signal has number 0)."""
WAKEUP_FD = sys.platform != "win32"
"""Windows takes only a socket as the wakeup fd; there the handler's own byte is the stop."""


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
    never waits (a full pipe already holds a stop); the relay thread sets the event.

    The pipe is also the process's wakeup fd (POSIX): the kernel may deliver a signal sent to
    the process to any of its threads, and Python runs the handler only when the main thread
    next runs bytecode, which a main thread blocked in ``stop.wait()`` never does (a front
    ignored SIGTERM so). CPython's C-level handler writes the signal's number there from
    whichever thread took it; the relay stops on a stop signal's number and passes others."""
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    signals = list(STOP_SIGNALS)
    hangup = getattr(signal, "SIGHUP", None)  # none on Windows, where the worker may run
    if hangup is not None and signal.getsignal(hangup) is not signal.SIG_IGN:
        signals.append(hangup)
    stopping = {NOTED, *(int(sig) for sig in signals)}
    read_end, write_end = os.pipe()
    if hasattr(os, "set_blocking"):  # POSIX; on Windows (the worker) a write may block instead
        os.set_blocking(write_end, False)

    def noted(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(BlockingIOError):  # the pipe is full: a stop is on its way
            os.write(write_end, NOTED.to_bytes(1, "big"))

    def relay() -> None:
        while received := os.read(read_end, 512):  # until the block ends and closes the pipe
            if stopping.intersection(received):  # each byte is read: the pipe never fills
                stop.set()

    relaying = threading.Thread(target=relay, name="stop-signals", daemon=True)
    relaying.start()
    previous = {sig: signal.signal(sig, noted) for sig in signals}
    wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False) if WAKEUP_FD else -1
    try:
        yield stop
    finally:
        if WAKEUP_FD:
            signal.set_wakeup_fd(wakeup)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(write_end)
        relaying.join()
        os.close(read_end)
