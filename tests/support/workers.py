"""A real worker in a test: ``horde-chat worker`` as the CLI starts it, and the wait for it.

``serving(config, native_client)`` starts a ``RunningWorker`` and yields it once the native
API lists it (its first pop); ``listed_workers(client)`` is that listing, empty unless the
answer is a 200 (a rate-limited 429's body is not a worker).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from runtime.worker.cli import RunningWorker
from runtime.worker.config import WorkerConfig
from tests.support.waiting import until


def listed_workers(native_client: httpx.Client) -> list[dict[str, Any]]:
    """GET /workers' list, or ``[]`` when it did not answer 200."""
    response = native_client.get("/workers")
    if response.status_code != 200:
        return []
    workers: list[dict[str, Any]] = response.json()
    return workers


def until_listed(native_client: httpx.Client, what: str = "the worker's first pop") -> None:
    """Wait until the native API lists a worker (it popped once)."""
    until(lambda: listed_workers(native_client), what)


@contextmanager
def serving(config: WorkerConfig, native_client: httpx.Client) -> Iterator[RunningWorker]:
    """``horde-chat worker`` as the CLI starts it (probes, then its loop), once it popped."""
    worker = RunningWorker.start(config)
    try:
        until_listed(native_client)
        yield worker
    finally:
        worker.stop(grace=5)
