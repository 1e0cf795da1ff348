"""runtime.native.queue.chat_find: a chat submit's key, job and online pool in one round trip.
The job's rows, built without the ORM's loader, hold what the ORM loads, value
and type, for every column the submit reads (all but the request's conversation); the pool
is ``online_workers``'; a text job, an unknown id and an unknown key are told apart as the
submit refuses them."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import pytest
from sqlalchemy import inspect, select
from sqlalchemy.orm import undefer

from runtime.native.db.tables import Generation, WaitingPrompt
from runtime.native.queue.chat_find import GEN_COLUMNS, WP_COLUMNS, find_chat_job
from runtime.native.queue.sweep import utcnow
from runtime.native.requests.text import online_workers
from tests.integration.chat_flow import chat_pop, submit_chat
from tests.integration.native_flow import pop, submit_text

pytestmark = pytest.mark.integration


def _hash(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def _same_columns(built: Any, loaded: Any, names: tuple[str, ...]) -> None:
    for name in names:
        ours, theirs = built.__dict__[name], getattr(loaded, name)
        assert (ours, type(ours)) == (theirs, type(theirs)), name


def test_a_chat_job_is_read_as_the_orm_loads_it(native_service, native_client, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)  # the worker is online
    request_id = submit_chat(native_client, requester.api_key, max_tokens=40)
    job_id = chat_pop(native_client, worker.api_key)["id"]
    context = native_service.context
    now = utcnow()

    with context.autocommit.connect() as connection:
        found = find_chat_job(connection, _hash(worker.api_key), job_id, context.policy, now)
        expected_pool = online_workers(connection, context.policy, now)
    assert (found.owner_id, found.trusted) == (worker.id, False)
    assert found.job is not None
    assert found.online == expected_pool
    assert found.online

    with context.sessions() as session:
        gen = session.get(Generation, uuid.UUID(job_id))
        wp = session.scalars(
            select(WaitingPrompt)
            .options(undefer(WaitingPrompt.chat_request), undefer(WaitingPrompt.messages))
            .where(WaitingPrompt.id == uuid.UUID(request_id))
        ).one()
        assert gen is not None
        _same_columns(found.job.gen, gen, GEN_COLUMNS)
        _same_columns(found.job.wp, wp, WP_COLUMNS)
        assert found.job.wp.chat_request
        assert wp.messages  # the request has a conversation, which the submit does not read
        assert (found.job.worker.id, found.job.worker.name) == (gen.worker_id, "chat-worker")
    # every column of both tables but the request's conversation, which no submit reads
    conversation = {"messages", "submitted_prompt"}
    assert set(WP_COLUMNS) == {c.key for c in inspect(WaitingPrompt).column_attrs} - conversation
    assert not conversation & set(found.job.wp.__dict__)
    assert set(GEN_COLUMNS) == {c.key for c in inspect(Generation).column_attrs}
    # built as loaded: in no session, nothing pending
    assert inspect(found.job.gen).transient
    assert not inspect(found.job.gen).modified


def test_what_is_no_chat_job_is_told_apart(native_service, native_client, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    submit_text(native_client, requester.api_key)
    text_job = pop(native_client, worker.api_key)["id"]
    context = native_service.context
    key = _hash(worker.api_key)

    def found(key_hash: str, job_id: str) -> tuple[int | None, bool]:
        with context.autocommit.connect() as connection:
            read = find_chat_job(connection, key_hash, job_id, context.policy, utcnow())
        return read.owner_id, read.job is not None

    assert found(key, text_job) == (worker.id, False)  # a text job
    assert found(key, str(uuid.uuid4())) == (worker.id, False)
    assert found(key, "not-an-id") == (worker.id, False)
    assert found(_hash("not-a-key"), text_job) == (None, False)
