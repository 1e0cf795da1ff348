"""How many times a Postgres backend flushed the WAL to disk, as Postgres counts it."""

from __future__ import annotations

from typing import Any

_FSYNCS = (
    "SELECT coalesce(sum(fsyncs), 0) FROM pg_stat_get_backend_io(pg_backend_pid())"
    " WHERE object = 'wal'"
)


def wal_fsyncs(driver: Any) -> int:
    """The WAL fsyncs the backend of ``driver`` (a psycopg connection, out of any
    transaction) made so far. A backend publishes its statistics when it goes idle out of
    a transaction, at most once a second unless told to: the first statement tells it."""
    autocommit = driver.autocommit
    driver.autocommit = True
    try:
        driver.execute("SELECT pg_stat_force_next_flush()")
        row = driver.execute(_FSYNCS).fetchone()
    finally:
        driver.autocommit = autocommit
    return int(row[0])
