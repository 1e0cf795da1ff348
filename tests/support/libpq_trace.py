"""What a psycopg connection sent, read off libpq's own trace: a round trip per Sync."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from psycopg import pq


@contextmanager
def messages_sent(driver: Any) -> Iterator[list[str]]:
    """The protocol messages ``driver`` (a psycopg connection) sent while the block ran:
    the ``F`` lines of libpq's trace, filled in when the block ends."""
    sent: list[str] = []
    with tempfile.TemporaryDirectory(prefix="libpq-trace-") as folder:
        path = Path(folder) / "trace"
        with path.open("w") as trace:
            driver.pgconn.trace(trace.fileno())
            driver.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
            try:
                yield sent
            finally:
                driver.pgconn.untrace()
        sent += [line for line in path.read_text().splitlines() if line.startswith("F\t")]


def syncs(sent: list[str]) -> int:
    """How many Syncs, so round trips, the messages hold."""
    return sum(1 for line in sent if "\tSync" in line)
