"""What the native API's benches share: the embedded stores with the native API on a free
port (migrated, rate limits and sweep off, all in a temporary folder removed afterwards).
The pop+submit workers are bench/support/cycle_client.py, a process of their own."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.config import Settings
from runtime.native.db.migrate import upgrade
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores

Job = dict[str, Any]


@contextmanager
def native_service() -> Iterator[NativeService]:
    """The native API on the embedded Postgres and Redis, stopped and removed on exit."""
    data_dir = Path(tempfile.mkdtemp(prefix="horde-bench-"))
    stores = EmbeddedStores.start(Settings(data_dir=data_dir))
    try:
        upgrade(stores.database_url)
        service = NativeService.start(
            Settings(rate_limits_enabled=False, data_dir=data_dir),
            database_url=stores.database_url,
            redis_url=stores.redis_url,
            port=0,
            sweep=False,
        )
        try:
            yield service
        finally:
            service.stop()
    finally:
        stores.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def analyze(service: NativeService) -> None:
    """Planner statistics for the freshly loaded queue, as autovacuum gathers them shortly
    after a bulk load in a running deployment (without them the planner guesses)."""
    with service.context.engine.connect() as connection:
        connection.execute(text("ANALYZE"))
        connection.commit()
