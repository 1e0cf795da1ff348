"""A real worker in a test: ``horde-chat worker`` as the CLI starts it, and the wait for it.

``serving(config, native_client)`` starts a ``RunningWorker`` and yields it once the native
API lists it (its first pop); ``listed_workers(client)`` is that listing, empty unless the
answer is a 200 (a rate-limited 429's body is not a worker). The wait asks at the pace GET
/workers' shipped limit allows, so it never meets that 429 itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from limits import parse

from generated.rate_limits import RATE_LIMITS
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


def listing_pace() -> float:
    """Seconds between two GET /workers that keep a poll under the route's shipped limit."""
    (shipped,) = RATE_LIMITS["workers"]
    item = parse(shipped.limit)
    return float(item.get_expiry()) / item.amount


def until_listed(
    native_client: httpx.Client, what: str = "the worker's first pop", seconds: float = 30
) -> None:
    """Wait until the native API lists a worker (it popped once)."""
    until(lambda: listed_workers(native_client), what, seconds, poll=listing_pace())


@contextmanager
def serving(config: WorkerConfig, native_client: httpx.Client) -> Iterator[RunningWorker]:
    """``horde-chat worker`` as the CLI starts it (probes, then its loop), once it popped."""
    worker = RunningWorker.start(config)
    try:
        until_listed(native_client)
        yield worker
    finally:
        worker.stop(grace=5)
