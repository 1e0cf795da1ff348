"""What the pages' browser tests share besides the browser (tests/support/chromium.py).

``serving(config)`` is a worker started as the CLI starts it, once it popped; ``WAIT`` is how
long a test waits for what it waits for (a reply, a worker's first pop).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from runtime.worker.cli import RunningWorker
from runtime.worker.config import WorkerConfig
from tests.faults.support import until

WAIT = 30.0


@contextmanager
def serving(config: WorkerConfig, native_client: httpx.Client) -> Iterator[RunningWorker]:
    """``horde-chat worker`` as the CLI starts it (probes, then its loop), once it popped."""
    worker = RunningWorker.start(config)
    try:
        until(lambda: native_client.get("/workers").json(), "the worker's first pop")
        yield worker
    finally:
        worker.stop(grace=5)
