"""runtime.stores.pipelined_begin: a pipeline that opens a transaction is one round trip.

Read off libpq's own trace of what the connection sent: a round trip per Sync.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from psycopg import RawCursor, pq
from sqlalchemy import Connection, Engine

from runtime.stores.database import make_engine
from runtime.stores.embedded import EmbeddedStores
from runtime.stores.pipelined_begin import PipelinedBegin
from tests.support.libpq_trace import messages_sent, syncs


@pytest.fixture
def engine(horde_stores: EmbeddedStores) -> Iterator[Engine]:
    engine = make_engine(horde_stores.database_url, pool_size=1)
    yield engine
    engine.dispose()


def driver_of(connection: Connection) -> Any:
    return connection.connection.driver_connection


def test_the_transactions_engine_connects_with_it(engine: Engine) -> None:
    with engine.connect() as connection:
        assert isinstance(driver_of(connection), PipelinedBegin)


def test_a_pipeline_that_opens_a_transaction_syncs_once(engine: Engine) -> None:
    with engine.connect() as connection:
        driver = driver_of(connection)
        with messages_sent(driver) as sent, RawCursor(driver) as one, RawCursor(driver) as two:
            with driver.pipeline():
                one.execute("SELECT $1::int", (1,))
                two.execute("SELECT $1::int", (2,))
            assert (one.fetchone(), two.fetchone()) == ((1,), (2,))
        assert driver.info.transaction_status == pq.TransactionStatus.INTRANS
        driver.rollback()
    begins = [line for line in sent if "BEGIN" in line]
    assert syncs(sent) == 1, sent  # psycopg's own: a Sync after BEGIN, then the pipeline's
    assert len(begins) == 1, sent  # the second statement queued no BEGIN of its own


def test_the_pipeline_runs_in_the_transaction_it_opened(engine: Engine) -> None:
    with engine.connect() as connection:
        connection.exec_driver_sql("CREATE TEMP TABLE kept (x int)")
        connection.commit()
        driver = driver_of(connection)
        with RawCursor(driver) as write, RawCursor(driver) as first, RawCursor(driver) as second:
            with driver.pipeline():
                write.execute("INSERT INTO kept VALUES (1)")
                first.execute("SELECT txid_current()")
                second.execute("SELECT txid_current()")
            assert first.fetchone() == second.fetchone()  # one transaction, not two
        driver.rollback()  # the driver's: SQLAlchemy saw no statement of this transaction
        # without a BEGIN, the pipeline's Sync would have committed the row
        assert connection.exec_driver_sql("SELECT count(*) FROM kept").scalar_one() == 0
        connection.rollback()


def test_outside_a_pipeline_a_statement_still_opens_a_transaction(engine: Engine) -> None:
    with engine.connect() as connection:
        connection.exec_driver_sql("CREATE TEMP TABLE kept (x int)")
        connection.commit()
        connection.exec_driver_sql("INSERT INTO kept VALUES (1)")
        connection.rollback()
        assert connection.exec_driver_sql("SELECT count(*) FROM kept").scalar_one() == 0
        connection.rollback()
