"""As many workers as the lane has threads, popping at once, are served on the database
connections the first round opened: none is opened and closed per request.

A pool smaller than the lane's threads, with overflow above it, closed each overflow
connection as it came back, so past 8 pops or submits at once each one more started a
Postgres backend and ended it (bench/native_cycles.py: pop+submit cycles at 16 workers fell
to two thirds of those at 8). Here every round's pops are held at once: the test locks the
workers' rows, which each pop's check-in updates, until all of them wait in Postgres, each
on a connection of its own."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from sqlalchemy import Connection, Engine, event, text

from generated.routes import ROUTES
from runtime.native.asgi import WORKER_LANE_THREADS
from runtime.native.server import NativeService
from runtime.stores.database import make_engine
from tests.conftest import MadeUser

pytestmark = pytest.mark.integration

POP = ROUTES["text_pop"].path
ROUNDS = 3
HELD_TIMEOUT = 30.0
PAUSE = 1.0
"""Seconds before each held round: its pops and the last round's stay within the shipped
60 pops a second a peer."""
WAITING_POPS = text(
    "SELECT count(*) FROM pg_stat_activity"
    " WHERE wait_event_type = 'Lock' AND query LIKE '%UPDATE workers%'"
)


@pytest.fixture
def opened(native_service: NativeService) -> Iterator[list[str]]:
    """Every database connection the native API opens meanwhile, in either of its pools."""
    ctx = native_service.context
    engines: list[Engine] = [ctx.engine, ctx.autocommit]
    seen: list[str] = []

    def connected(dbapi_connection: Any, _record: Any) -> None:
        seen.append(type(dbapi_connection).__name__)

    for engine in engines:
        event.listen(engine, "connect", connected)
    try:
        yield seen
    finally:
        for engine in engines:
            event.remove(engine, "connect", connected)


@pytest.fixture
def own_engine(native_service: NativeService) -> Iterator[Engine]:
    """The test's own connections (the lock's and the watch's), outside the API's pools."""
    engine = make_engine(str(native_service.context.engine.url), pool_size=2, max_overflow=0)
    try:
        yield engine
    finally:
        engine.dispose()


def _pop(client: httpx.Client, key: str, name: str) -> int:
    body = {"name": name, "models": ["test-model-7B"], "max_length": 80}
    return client.post(POP, headers={"apikey": key}, json=body).status_code


def _held_round(client: httpx.Client, key: str, names: list[str], engine: Engine) -> list[int]:
    """Every worker pops once, all of them held in Postgres at once, then let go."""
    time.sleep(PAUSE)
    with engine.connect() as lock, engine.connect() as watch:
        lock.execute(text("SELECT id FROM workers WHERE name = ANY(:n) FOR UPDATE"), {"n": names})
        with ThreadPoolExecutor(len(names)) as threads:
            pops = [threads.submit(_pop, client, key, name) for name in names]
            _wait_until_waiting(watch, len(names))
            lock.commit()
            return [pop.result() for pop in pops]


def _wait_until_waiting(watch: Connection, count: int) -> None:
    deadline = time.monotonic() + HELD_TIMEOUT
    while (waiting := watch.scalar(WAITING_POPS)) != count:
        watch.commit()  # a fresh read of pg_stat_activity, which a transaction keeps
        assert time.monotonic() < deadline, f"{waiting} of {count} pops held in Postgres"
        time.sleep(0.02)


def test_pops_held_at_once_reuse_the_database_connections(
    native_service: NativeService,
    native_db: Any,
    make_user: Callable[..., MadeUser],
    opened: list[str],
    own_engine: Engine,
) -> None:
    owner = make_user("pool-owner", trusted=True)  # an untrusted user may run 3 workers
    names = [f"pool-worker-{i}" for i in range(WORKER_LANE_THREADS)]
    limits = httpx.Limits(max_connections=len(names), max_keepalive_connections=len(names))
    with httpx.Client(base_url=native_service.url, timeout=60, limits=limits) as client:
        registered = [_pop(client, owner.api_key, name) for name in names]
        first = _held_round(client, owner.api_key, names, own_engine)  # fills the pool
        after_first = len(opened)
        later = [_held_round(client, owner.api_key, names, own_engine) for _ in range(ROUNDS)]
    assert set(registered) == set(first) == {200}
    assert all(set(statuses) == {200} for statuses in later)
    assert len(opened) == after_first, (
        f"{len(opened) - after_first} database connections opened after the first round"
    )
