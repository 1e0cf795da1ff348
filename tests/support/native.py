"""A native API started for a test on the embedded stores: a free 127.0.0.1 port, no
background sweeper, stopped (and its temporary object store removed) on exit.

    with running_native(stores, Settings()) as native:
        ...  # native.url
    with running_native_with_objects(stores, "horde-objects-", service_passkey=...) as native:
        ...  # a filesystem object store in a fresh temp dir

Every service runs at the shipped rate limits (spec/rate_limits.yaml). A test that needs
more of one route says why and raises only that one: ``raised_limits(service, op)`` (or
the ``raised_limits`` marker, tests/conftest.py) in the running service, ``route_limits``
to set a route's limits, ``Policy(rate_limits=raised(RATE_LIMITS, op))`` for a service
of its own.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from sqlalchemy import event

from runtime.config import Settings
from runtime.native.queue.policy import Policy
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from runtime.tables.rate_limits import RateLimit


@contextmanager
def running_native(
    stores: EmbeddedStores, settings: Settings, policy: Policy | None = None
) -> Iterator[NativeService]:
    """The native API with ``settings`` (and ``policy``, else the shipped one) on ``stores``,
    stopped on exit."""
    service = NativeService.start(
        settings,
        database_url=stores.database_url,
        redis_url=stores.redis_url,
        policy=policy,
        host="127.0.0.1",
        port=0,
        sweep=False,
    )
    try:
        yield service
    finally:
        service.stop()


@contextmanager
def running_native_with_objects(
    stores: EmbeddedStores, objects_prefix: str, policy: Policy | None = None, **settings: Any
) -> Iterator[NativeService]:
    """The native API (shipped rate limits unless ``policy``) and its filesystem object store
    in a new temp dir named ``objects_prefix...`` (removed on exit); ``settings`` are further
    Settings."""
    objects_dir = Path(tempfile.mkdtemp(prefix=objects_prefix))
    try:
        with running_native(stores, Settings(data_dir=objects_dir, **settings), policy) as service:
            yield service
    finally:
        shutil.rmtree(objects_dir, ignore_errors=True)


LIMIT_COUNTS = "LIMITS:*horde:limits*"
"""The native API's rate-limit counters in Redis (the limits library's prefix, then ours)."""


@contextmanager
def statements_sent(service: NativeService) -> Iterator[list[str]]:
    """Every SQL statement the native API sends on its engine while the block runs."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    engine = service.context.engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


@contextmanager
def on_both_engines(service: NativeService, name: str, hook: Callable[..., Any]) -> Iterator[None]:
    """``hook`` listens for the SQLAlchemy event ``name`` on both of the native API's engines
    (the transactions' and the autocommit one) while the block runs."""
    ctx = service.context
    engines = (ctx.engine, ctx.autocommit)
    for engine in engines:
        event.listen(engine, name, hook)
    try:
        yield
    finally:
        for engine in engines:
            event.remove(engine, name, hook)


@contextmanager
def route_limits(service: NativeService, operation_id: str, *limits: RateLimit) -> Iterator[None]:
    """``operation_id``'s rate limits replaced by ``limits`` (one for each limit the route
    has, in order) while the block runs; every other route keeps the shipped ones. The
    native API reads them from its policy on every call. The caller says why it needs them."""
    ctx = service.context
    before = ctx.policy
    shipped = before.rate_limits[operation_id]
    if len(limits) != len(shipped):
        raise ValueError(f"{operation_id} has {len(shipped)} limits: {shipped}")
    ctx.policy = replace(before, rate_limits={**before.rate_limits, operation_id: limits})
    try:
        yield
    finally:
        ctx.policy = before


RAISED = 1000
"""How much ``raised`` multiplies a route's limits by."""


def raised(
    table: Mapping[str, tuple[RateLimit, ...]], *operation_ids: str
) -> dict[str, tuple[RateLimit, ...]]:
    """``table`` with the named routes' limits (every value of each) multiplied by RAISED."""

    def times(value: str | None) -> str | None:
        if value is None:
            return None
        amount, per = value.split(" ", 1)
        return f"{int(amount) * RAISED} {per}"

    out = dict(table)
    for op in operation_ids:
        out[op] = tuple(
            replace(
                limit,
                limit=str(times(limit.limit)),
                anonymous=times(limit.anonymous),
                service=times(limit.service),
            )
            for limit in table[op]
        )
    return out


@contextmanager
def raised_limits(service: NativeService, *operation_ids: str) -> Iterator[None]:
    """The named routes' limits raised (``raised``) in the running service while the block
    runs; every other route keeps the shipped ones. The caller says why it needs more."""
    ctx = service.context
    before = ctx.policy
    ctx.policy = replace(before, rate_limits=raised(before.rate_limits, *operation_ids))
    try:
        yield
    finally:
        ctx.policy = before


def forget_rate_limit_counts(service: NativeService) -> None:
    """Every rate-limit counter gone, as when each window ends (the limits stay)."""
    redis = service.context.redis
    for key in list(redis.scan_iter(LIMIT_COUNTS)):
        redis.delete(key)
