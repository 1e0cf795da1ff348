"""A new request's writes in one statement (``requests.enqueue``): the row is the one the
ORM's flush would have written, the horde tax and the operation key go with it, a key
claimed first leaves the claim empty, and an upfront hold still follows the tax; the text
route queues its requests the same way."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from psycopg import pq
from sqlalchemy import Text, cast, func, select

from generated.chat.names import HORDE_SLOW_WORKERS, PARAM_HORDE
from runtime.native.accounts.kudos import HORDE_TAX_REASON
from runtime.native.db.tables import KudosHold, OperationKey, User, WaitingPrompt
from runtime.native.queue.sweep import utcnow
from runtime.native.requests.enqueue import REQUESTS, enqueue_request
from runtime.stores.database import flush_wal, transaction
from tests.integration.chat_flow import chat_async, chat_body, chat_pop
from tests.integration.native_flow import ledger
from tests.support.libpq_trace import messages_sent, syncs
from tests.support.native import statements_sent
from tests.support.wal_flushes import wal_fsyncs

pytestmark = pytest.mark.integration

TAX = Decimal("1.00")


def _given(user_id: int, now: datetime | None = None) -> dict[str, Any]:
    """A chat row's values, most columns left to their defaults (the nullable JSON ones,
    the conversation, unset)."""
    now = now or utcnow()
    return {
        "id": uuid.uuid4(), "is_chat": True, "user_id": user_id, "prompt": "p", "n": 1,
        "jobs": 1, "max_length": 80, "max_context_length": 1024, "created": now,
        "expiry": now + timedelta(hours=1), "kudos_estimate": Decimal("3.50"),
    }  # fmt: skip


def _stored(native_db, wp_id: uuid.UUID) -> dict[str, str | None]:
    """Every column of the row but its id, as Postgres spells it: a JSON null is "null",
    SQL NULL is None."""
    columns = [c for c in REQUESTS.columns if c.key != "id"]
    with native_db() as session:
        row = session.execute(
            select(*(cast(c, Text) for c in columns)).where(REQUESTS.c.id == wp_id)
        ).one()
    return {c.key: value for c, value in zip(columns, row, strict=True)}


def test_the_row_is_the_one_the_orm_would_have_written(native_db, make_user):
    requester = make_user("req", kudos=10)
    now = utcnow()
    enqueued = WaitingPrompt(**_given(requester.id, now))
    flushed = WaitingPrompt(**_given(requester.id, now))
    with transaction(native_db) as session:
        assert enqueue_request(session, enqueued, TAX, None)
        session.add(flushed)
        session.flush()
        flushed_values = dict(flushed.__dict__)
    stored = _stored(native_db, enqueued.id)
    assert stored == _stored(native_db, flushed.id)
    assert (stored["messages"], stored["chat_request"]) == (None, None)  # SQL NULL
    assert (stored["object_keys"], stored["active"]) == ("[]", "true")
    # The row holds the defaults it was stored with, as a flushed one does.
    for column in REQUESTS.columns:
        if column.key != "id" and column.key in flushed_values:
            assert enqueued.__dict__[column.key] == flushed_values[column.key], column.key
    assert ledger(native_db, requester.id)[-1] == (HORDE_TAX_REASON, -TAX)
    with native_db() as session:
        assert session.get(User, requester.id).kudos == Decimal(10) - TAX


def test_the_operation_key_is_claimed_with_the_row(native_db, make_user):
    requester = make_user("req", kudos=10)
    wp = WaitingPrompt(**_given(requester.id))
    with transaction(native_db) as session:
        assert enqueue_request(session, wp, TAX, ("op-1", "print"))
    with native_db() as session:
        claim = session.scalars(select(OperationKey)).one()
    assert (claim.user_id, claim.key, claim.fingerprint) == (requester.id, "op-1", "print")
    assert (claim.wp_id, claim.kudos) == (wp.id, Decimal("3.50"))


@pytest.mark.parametrize("commit", [False, True], ids=["then-commit", "commit-with-it"])
def test_a_key_claimed_first_leaves_the_claim_empty(native_db, make_user, commit):
    # With its COMMIT in the same round trip the late submit cannot roll back: the
    # statement itself must have written nothing (no row, no tax) once its claim failed.
    requester = make_user("req", kudos=10)
    first = WaitingPrompt(**_given(requester.id))
    with transaction(native_db) as session:
        assert enqueue_request(session, first, TAX, ("op-1", "print"))
    late = WaitingPrompt(**_given(requester.id))
    with native_db() as session:
        assert not enqueue_request(session, late, TAX, ("op-1", "print"), commit=commit)
        session.rollback()  # the caller's retry: nothing of the late one is kept
    with native_db() as session:
        assert session.scalar(select(func.count()).select_from(WaitingPrompt)) == 1
        assert session.scalar(select(OperationKey.wp_id)) == first.id
    assert [reason for reason, _ in ledger(native_db, requester.id)] == [
        "grant",
        HORDE_TAX_REASON,
    ]
    with native_db() as session:
        assert session.get(User, requester.id).kudos == Decimal(10) - TAX


def test_the_commit_sent_with_it_leaves_the_disk_flush_to_flush_wal(
    native_service, native_db, make_user
):
    # Its COMMIT makes the request visible at once without waiting for the disk (a pop may
    # take it); the submit then waits in flush_wal, whose own commit flushes the WAL.
    requester = make_user("req", kudos=10)
    wp = WaitingPrompt(**_given(requester.id))
    with native_db() as session:
        driver = session.connection().connection.driver_connection
        before = wal_fsyncs(driver)
        assert enqueue_request(session, wp, TAX, None, commit=True)
        assert wal_fsyncs(driver) == before  # committed, and this backend did not flush
        session.rollback()
    with native_db() as session:
        assert session.get(WaitingPrompt, wp.id) is not None
    with native_service.context.autocommit.connect() as connection:  # as the submit's
        flusher = connection.connection.driver_connection
        flushed = wal_fsyncs(flusher)
        flush_wal(flusher)
        assert wal_fsyncs(flusher) == flushed + 1


@pytest.mark.parametrize("operation", [None, ("op-1", "print")], ids=["no-key", "key"])
def test_with_commit_the_statement_and_its_commit_are_one_round_trip(
    native_db, make_user, operation
):
    # The row is the one the statement without commit writes, committed when it returns:
    # the connection has no transaction open, and the session's rollback undoes nothing.
    requester = make_user("req", kudos=10)
    now = utcnow()
    committed = WaitingPrompt(**_given(requester.id, now))
    with native_db() as session:
        driver = session.connection().connection.driver_connection
        with messages_sent(driver) as sent:
            assert enqueue_request(session, committed, TAX, operation, commit=True)
        assert driver.info.transaction_status == pq.TransactionStatus.IDLE
        session.rollback()
    assert syncs(sent) == 1, sent  # the statement and the COMMIT: one round trip
    assert any("COMMIT" in line for line in sent), sent
    plain = WaitingPrompt(**_given(requester.id, now))
    with transaction(native_db) as session:
        assert enqueue_request(session, plain, TAX, None)
    assert _stored(native_db, committed.id) == _stored(native_db, plain.id)
    assert [reason for reason, _ in ledger(native_db, requester.id)] == [
        "grant",
        HORDE_TAX_REASON,
        HORDE_TAX_REASON,
    ]
    with native_db() as session:
        assert session.get(User, requester.id).kudos == Decimal(10) - 2 * TAX
        claims = session.scalars(select(OperationKey)).all()
    assert [(c.key, c.wp_id) for c in claims] == ([("op-1", committed.id)] if operation else [])


def test_a_chat_request_that_keeps_slow_workers_away_holds_its_quote(
    native_client, native_db, make_user
):
    # slow_workers false needs the quote upfront (as upstream's require_upfront_kudos): the
    # hold follows the tax in the ledger, and a user who cannot cover it queues nothing.
    requester, poor, worker = make_user("req", 1000), make_user("poor"), make_user("wk")
    chat_pop(native_client, worker.api_key)
    body = chat_body(**{PARAM_HORDE: {HORDE_SLOW_WORKERS: False}})
    queued = chat_async(native_client, requester.api_key, body)
    assert queued.status_code == 202, queued.text
    quote = Decimal(str(queued.json()["kudos"]))
    moves = ledger(native_db, requester.id)
    assert [reason for reason, _ in moves] == ["grant", HORDE_TAX_REASON, "upfront_hold"]
    with native_db() as session:
        hold = session.scalars(select(KudosHold)).one()
        balance = session.get(User, requester.id).kudos
    assert (str(hold.wp_id), hold.amount) == (queued.json()["id"], quote)
    assert balance == sum(delta for _, delta in moves)
    refused = chat_async(native_client, poor.api_key, body)
    assert refused.json()["rc"] == "KudosUpfront", refused.text
    assert ledger(native_db, poor.id) == []
    with native_db() as session:
        assert session.scalar(select(func.count()).select_from(WaitingPrompt)) == 1


def test_a_text_request_is_queued_by_the_same_statement(
    native_service, native_client, native_db, make_user
):
    # The text route's admission and writes are the chat route's (requests.admission,
    # requests.enqueue): the row and the tax in one statement, the row with its defaults,
    # the queue priority read under the lock; then the concurrency counted in the same
    # round trip refuses the next one.
    requester = make_user("txt", kudos=10, concurrency=2)
    body = {
        "prompt": "Once upon a time",
        "params": {"max_length": 80, "n": 2, "stop_sequence": ["\n"]},
        "models": ["test-model-7B"],
        "slow_workers": True,
    }
    with statements_sent(native_service) as sent:
        queued = native_client.post(
            "/generate/text/async",
            headers={"apikey": requester.api_key, "Client-Agent": "enqueue-test:1:tests"},
            json=body,
        )
    assert queued.status_code == 202, queued.text
    writes = [s for s in sent if "INSERT INTO" in s]
    assert len(writes) == 1, writes  # the row and the tax's ledger row together
    assert "INSERT INTO waiting_prompts" in writes[0]
    assert "INSERT INTO kudos_ledger" in writes[0]
    stored = _stored(native_db, uuid.UUID(queued.json()["id"]))
    assert (stored["is_chat"], stored["active"], stored["prompt"]) == (
        "false",
        "true",
        "Once upon a time",
    )
    assert (stored["n"], stored["jobs"], stored["max_length"]) == ("2", "2", "80")
    assert (stored["messages"], stored["chat_request"], stored["object_keys"]) == (
        None,
        None,
        "[]",
    )
    assert stored["models"] == '["test-model-7B"]'
    assert stored["client_agent"] == "enqueue-test:1:tests"
    assert Decimal(stored["extra_priority"]) == Decimal(10)  # the balance before the tax
    # the answer rounds the quote to whole kudos, as upstream's; the row keeps its cents
    assert queued.json()["kudos"] == round(Decimal(stored["kudos_estimate"]))
    with native_db() as session:
        row = session.get(WaitingPrompt, uuid.UUID(queued.json()["id"]))
        assert row.params["stop_sequence"] == ["\n"]
        assert row.expiry > row.created
        balance = session.get(User, requester.id).kudos
    moves = ledger(native_db, requester.id)
    assert [reason for reason, _ in moves] == ["grant", HORDE_TAX_REASON]
    assert balance == sum(delta for _, delta in moves)
    refused = native_client.post(
        "/generate/text/async", headers={"apikey": requester.api_key}, json=body
    )
    assert (refused.status_code, refused.json()["rc"]) == (429, "TooManyPrompts")
