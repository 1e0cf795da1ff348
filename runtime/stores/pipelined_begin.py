"""A psycopg connection whose BEGIN rides in the pipeline that opens a transaction.

psycopg sends a transaction's BEGIN before the statement that opens it. In a pipeline it
then syncs on BEGIN's answer, a round trip of its own, before it sends the pipeline's
statements: a submit's admission reads (``requests.admission``) took two round trips, not
one. ``PipelinedBegin`` queues the BEGIN with the first statement instead, and reads its
answer with theirs at the pipeline's sync. Outside a pipeline it is psycopg's own.

A round trip costs more than the server's time here: the thread that waited has to win the
interpreter lock back from the process's other threads (docs/performance.md).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.abc import PQGen
from psycopg.pq import TransactionStatus


class PipelinedBegin(psycopg.Connection[Any]):
    """``psycopg.Connection``, but a pipeline's BEGIN is sent with its first statement."""

    def _start_query(self) -> PQGen[None]:
        if self._pipeline is None:
            return (yield from super()._start_query())
        if self._autocommit or self.pgconn.transaction_status != TransactionStatus.IDLE:
            return None
        # queued: the statement's execute sends it with the BEGIN (the connection is then
        # ACTIVE, so the pipeline's next statement queues no second BEGIN); no sync here
        yield from self._exec_command(self._get_tx_start_command())
        return None


def connect(*args: Any, **kwargs: Any) -> PipelinedBegin:
    """``psycopg.connect``, giving a ``PipelinedBegin``."""
    return PipelinedBegin.connect(*args, **kwargs)
