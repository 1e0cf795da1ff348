"""A known worker's pop (its check-in and its claim) commits without waiting for its WAL to
reach the disk; every other write still waits (``queue.jobs.register_and_pop``).

Measured by Postgres itself: the WAL fsyncs the pop's own backend made
(``tests.support.wal_flushes``), before and after the pop, and after a durable write on
that connection."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from runtime.contract.declaration import parse_worker_declaration
from runtime.native.accounts.keys import key_hash_of
from runtime.native.queue.jobs import register_and_pop
from runtime.native.queue.sweep import utcnow
from tests.integration.chat_flow import chat_pop, chat_pop_body, submit_chat
from tests.support.wal_flushes import wal_fsyncs

pytestmark = pytest.mark.integration


def _pop_body(**fields: Any) -> dict[str, Any]:
    """A chat worker's pop body as the route hands it on (its defaults filled in)."""
    return {"amount": 1, "threads": 1, **chat_pop_body(**fields)}


def test_a_pop_s_claim_does_not_wait_for_the_wal_flush(
    native_service, native_client, native_db, make_user
):
    requester = make_user("requester", kudos=100)
    owner = make_user("owner")
    assert chat_pop(native_client, owner.api_key)["id"] is None  # the worker, registered
    request_id = submit_chat(native_client, requester.api_key)
    ctx = native_service.context
    body = _pop_body()
    with ctx.autocommit.connect() as connection:
        driver = connection.connection.driver_connection
        before = wal_fsyncs(driver)
        known, popped = register_and_pop(  # in autocommit: the statement commits itself
            connection,
            ctx.policy,
            key_hash_of(owner.api_key),
            body,
            utcnow(),
            parse_worker_declaration(body),
        )
        assert known is not None
        assert known.worker is not None
        assert popped.job is not None
        assert str(popped.job.wp_id) == request_id
        assert wal_fsyncs(driver) == before  # the claim committed, unflushed
        # The measure sees a flush: an ordinary write on the same connection waits for one.
        connection.execute(
            text("UPDATE users SET kudos = kudos WHERE id = :id"), {"id": requester.id}
        )
        assert wal_fsyncs(driver) > before
    with native_db() as session:  # the claim is committed: visible to every session
        claimed = session.execute(
            text("SELECT count(*) FROM processing_gens WHERE wp_id = :id"), {"id": request_id}
        ).scalar_one()
    assert claimed == 1
