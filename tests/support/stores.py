"""Embedded stores for a test suite: a real PostgreSQL and redis-server in a temp dir.

``running_stores(prefix)`` starts them, upgrades the schema to head, and removes everything
on exit; ``running_redis(prefix)`` is a redis-server alone. The session's stores
(tests/conftest.py), the fault suite's and a module that stops its own servers all start
theirs here.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from runtime.config import Settings
from runtime.native.db.migrate import upgrade
from runtime.stores.embedded import EmbeddedStores
from runtime.stores.embedded_redis import EmbeddedRedis


@contextmanager
def running_stores(prefix: str) -> Iterator[EmbeddedStores]:
    """Stores in a fresh ``prefix``-named temp dir (our own, not pytest's: concurrent pytest
    runs rotate and re-permission /tmp/pytest-of-<user>, which the postgres system user must
    keep reaching)."""
    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    stores = EmbeddedStores.start(Settings(data_dir=data_dir))
    try:
        upgrade(stores.database_url)
        yield stores
    finally:
        stores.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@contextmanager
def running_redis(prefix: str) -> Iterator[EmbeddedRedis]:
    """A redis-server of its own in a fresh ``prefix``-named temp dir, removed on exit."""
    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    server = EmbeddedRedis.start(data_dir)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
