"""SQLAlchemy 2 engine and transaction helpers (psycopg 3 driver)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry

from runtime.stores import pipelined_begin
from runtime.stores.embedded_postgres import sqlalchemy_url

PING_AFTER_IDLE_S = 1.0
"""A pooled connection idle longer than this is pinged when checked out (``ping_if_idle``)."""
_CHECKED_IN = "horde_checked_in"


TRANSACTION_CONNECTIONS = 20
"""The most connections an engine keeps by default: upstream's pool, 15 and 5 overflow."""


def make_engine(
    url: str,
    *,
    pool_size: int = TRANSACTION_CONNECTIONS,
    autocommit: bool = False,
) -> Engine:
    """An engine that keeps up to ``pool_size`` connections; any Postgres URL spelling works.

    Upstream's 15 and 5 overflow are 20 kept here: SQLAlchemy closes an overflow connection as
    it comes back, so past 15 requests at once each one more started a Postgres backend and
    ended it (docs/performance.md). A thread finding every connection out waits for one.

    ``autocommit``: its connections have no transactions (``autocommit_engine``).

    A connection lost to a database restart is replaced: one idle for a while is pinged when
    checked out (``ping_if_idle``); a busy one is not (pool_pre_ping's ping was a quarter
    of a pop+submit cycle's round trips), so its request fails with SQLAlchemy's
    OperationalError (a 503; a driver's cursor's error too: the session's rollback at its
    end raises it) and SQLAlchemy's disconnect handling invalidates the whole
    pool: the next request gets a new connection.
    """
    engine = create_engine(
        sqlalchemy_url(url),
        pool_size=pool_size,
        max_overflow=0,  # kept, never opened and closed a request (the docstring)
        hide_parameters=True,  # an error's text never carries a statement's values (prompts)
        **({"isolation_level": "AUTOCOMMIT"} if autocommit else {}),
    )
    event.listen(engine, "checkin", _note_checkin)
    event.listen(engine, "checkout", ping_if_idle(engine))
    if not autocommit:  # an autocommit connection sends no BEGIN
        event.listen(engine, "do_connect", _connect_pipelined_begin)
    return engine


def _connect_pipelined_begin(
    dialect: Any, record: ConnectionPoolEntry, cargs: Any, cparams: Any
) -> Any:
    """A transactions' engine connects with ``PipelinedBegin``: a pipeline that opens a
    transaction sends its BEGIN with its statements, not a round trip before them."""
    return pipelined_begin.connect(*cargs, **cparams)


def _note_checkin(dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
    record.info[_CHECKED_IN] = time.monotonic()


def ping_if_idle(engine: Engine) -> Any:
    """A pool checkout hook: a connection back in the pool for over PING_AFTER_IDLE_S is
    pinged; a failed ping invalidates the pool (connections older than now are replaced) and
    the checkout is retried on a new connection. A new connection (no check-in noted: its
    record's info is cleared when it is replaced) is not pinged."""

    def checkout(dbapi_connection: Any, record: ConnectionPoolEntry, proxy: Any) -> None:
        checked_in = record.info.get(_CHECKED_IN)
        if checked_in is None or time.monotonic() - checked_in <= PING_AFTER_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as lost:
            if not engine.dialect.is_disconnect(lost, dbapi_connection, None):
                raise
            disconnected = DisconnectionError(str(lost))
            disconnected.invalidate_pool = True  # a restart lost every pooled connection
            raise disconnected from lost

    return checkout


def autocommit_engine(url: str, connections: int) -> Engine:
    """An engine whose connections are in autocommit from their connect on: a read of one
    statement, or of several that each see what was committed when it ran, and a statement
    that is a transaction of its own (a database function) save the BEGIN and COMMIT round
    trips. Its own pool, not ``engine.execution_options(isolation_level=...)`` on the
    transactions' pool: that sets the isolation level at every checkout and resets it at
    every check-in, CPU spent twice a pop+submit cycle (docs/performance.md).

    It keeps up to ``connections`` open and opens no more: a thread finding them all out
    waits for one. No overflow: an overflow connection is closed as it comes back, so a
    pool smaller than its busy threads started and ended a Postgres backend a request."""
    return make_engine(url, pool_size=connections, autocommit=True)


UNFLUSHED_COMMIT = "set_config('synchronous_commit', 'off', true)"
"""SQL for a statement's select list: its transaction's commit does not wait for the disk.
Its caller answers nobody who relies on the write before ``flush_wal``, or the write is one
a crash may lose (a pop's check-in and claim)."""


def flush_wal(driver: psycopg.Connection[Any]) -> None:
    """Wait until every commit made so far is on disk, those made with synchronous_commit
    off included. A commit waits for the disk only if its transaction wrote to the WAL: so
    a transaction of one empty logical-decoding message (any role may write one; a decoding
    client, if any, reads it as ``horde-chat``'s) whose commit flushes all WAL before it.
    ``driver``: a psycopg connection in autocommit (``autocommit_engine``'s), with
    synchronous_commit on."""
    driver.execute("SELECT pg_logical_emit_message(true, 'horde-chat', '')")


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def snapshot_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Sessions whose transactions are read-only and REPEATABLE READ on ``engine``'s pool:
    every statement of one sees the database as of its first, so a read of several
    statements (a request, then its jobs) never sees half of a transaction committed
    between them, as it does in autocommit or READ COMMITTED. Postgres never fails a
    read-only one for serialization. The level is set at checkout and reset at check-in
    (client-side with psycopg 3: no round trip), and costs BEGIN and COMMIT."""
    snapshots = engine.execution_options(
        isolation_level="REPEATABLE READ", postgresql_readonly=True
    )
    return make_sessionmaker(snapshots)


@contextmanager
def transaction(sessions: sessionmaker[Session]) -> Iterator[Session]:
    """One session, one transaction: committed on success, rolled back on any exception."""
    with sessions() as session, session.begin():
        yield session
