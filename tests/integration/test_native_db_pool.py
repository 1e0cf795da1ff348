"""Requests held in Postgres at once, as many as a pool's connections, are served on the
connections the first such round opened: none is opened and closed per request.

A pool with overflow closed each overflow connection as it came back, so past its size every
request at once more started a Postgres backend and ended it (bench/native_cycles.py:
pop+submit cycles at 16 workers fell to two thirds of those at 8). Each round here holds its
requests at once: the test locks what they read or write until every one of them waits in
Postgres, each on a connection of its own, then lets them go.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import sessionmaker

from generated.routes import ROUTES
from runtime.native.asgi import WORKER_LANE_THREADS
from runtime.native.server import NativeService
from runtime.stores.database import TRANSACTION_CONNECTIONS, make_engine
from tests.conftest import MadeUser
from tests.integration.native_flow import submit_text
from tests.support.native import on_both_engines
from tests.support.waiting import lock_waiters, until

pytestmark = pytest.mark.integration

POP = ROUTES["text_pop"].path
STATUS = ROUTES["text_status"].path
PAUSE = 1.0
"""Seconds before each held round: its requests and the last round's stay within the
shipped limits (60 pops a second a peer)."""


@dataclass
class Pools:
    """What a test sees of the native API's pools: every database connection they open
    meanwhile, and the test's own (the lock's, the watch's) outside them."""

    opened: list[str]
    own: Engine

    def assert_none_opened_since(self, count: int) -> None:
        assert len(self.opened) == count, (
            f"{len(self.opened) - count} database connections opened after the first round"
        )


@pytest.fixture
def pools(native_service: NativeService, native_db: Any) -> Iterator[Pools]:
    """On a clean database; after, the pools let go of their idle connections (the
    session's service is shared) and the test's engine is closed."""
    ctx = native_service.context
    seen = Pools([], make_engine(str(ctx.engine.url), pool_size=2))

    def connected(dbapi_connection: Any, _record: Any) -> None:
        seen.opened.append(type(dbapi_connection).__name__)

    try:
        with on_both_engines(native_service, "connect", connected):
            yield seen
    finally:
        ctx.engine.dispose()
        ctx.autocommit.dispose()
        seen.own.dispose()


def _held_round(
    engine: Engine, lock: str, waiting_on: str, calls: list[Callable[[], int]]
) -> list[int]:
    """Run ``calls`` at once while ``lock`` is held, let go once every one of them waits
    for it in Postgres (its statement mentions ``waiting_on``); their status codes."""
    time.sleep(PAUSE)
    watch = sessionmaker(engine)
    with engine.connect() as holder:
        holder.execute(text(lock))
        with ThreadPoolExecutor(len(calls)) as threads:
            running = [threads.submit(call) for call in calls]
            until(
                lambda: lock_waiters(watch, f"%{waiting_on}%") == len(calls),
                f"{len(calls)} requests held in Postgres",
            )
            holder.commit()
            return [call.result() for call in running]


def test_pops_held_at_once_reuse_the_database_connections(
    native_service: NativeService, make_user: Callable[..., MadeUser], pools: Pools
) -> None:
    """The workers' lane: as many workers as it has threads, their pops held by their rows,
    which each pop's check-in updates."""
    owner = make_user("pool-owner", trusted=True)  # an untrusted user may run 3 workers
    names = [f"pool-worker-{i}" for i in range(WORKER_LANE_THREADS)]
    limits = httpx.Limits(max_connections=len(names), max_keepalive_connections=len(names))
    with httpx.Client(base_url=native_service.url, timeout=60, limits=limits) as client:

        def pop(name: str) -> Callable[[], int]:
            body = {"name": name, "models": ["test-model-7B"], "max_length": 80}
            headers = {"apikey": owner.api_key}
            return lambda: client.post(POP, headers=headers, json=body).status_code

        pops = [pop(name) for name in names]
        registered = [call() for call in pops]
        rows = "SELECT id FROM workers WHERE name LIKE 'pool-worker-%' FOR UPDATE"
        first = _held_round(pools.own, rows, "UPDATE workers", pops)  # fills the pool
        after_first = len(pools.opened)
        later = [_held_round(pools.own, rows, "UPDATE workers", pops) for _ in range(3)]
    assert set(registered) == set(first) == {200}
    assert all(set(statuses) == {200} for statuses in later)
    pools.assert_none_opened_since(after_first)


def test_status_reads_held_at_once_reuse_the_database_connections(
    native_service: NativeService, make_user: Callable[..., MadeUser], pools: Pools
) -> None:
    """The clients' threads: as many status reads as the transactions' pool holds, held by
    the requests' table."""
    requester = make_user("pool-requester", kudos=100)
    count = TRANSACTION_CONNECTIONS
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    api = f"{native_service.url}/api/v2"
    with httpx.Client(base_url=api, timeout=60, limits=limits) as client:
        request_id = submit_text(client, requester.api_key)
        url = native_service.url + STATUS.format(id=request_id)  # the route's whole path
        reads = [lambda: client.get(url).status_code] * count
        table = "LOCK TABLE waiting_prompts IN ACCESS EXCLUSIVE MODE"
        first = _held_round(pools.own, table, "waiting_prompts", reads)  # fills the pool
        after_first = len(pools.opened)
        later = _held_round(pools.own, table, "waiting_prompts", reads)
    # 40 reads of one request's status: within its 60 a minute
    assert set(first) == set(later) == {200}
    pools.assert_none_opened_since(after_first)
