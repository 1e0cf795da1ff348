"""A submit counts its user's running jobs (``queued_jobs``, for the concurrency limit) on
the index of running jobs, never by scanning every job the horde keeps: finished jobs stay
until their request expires, so a scan grows with the whole horde's recent traffic."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import insert, select, text

from runtime.native.db.tables import Generation, WaitingPrompt, Worker
from runtime.native.queue.sweep import utcnow
from runtime.stores.database import transaction
from tests.integration.chat_flow import chat_pop, submit_chat
from tests.integration.planned import plan_nodes, plans, recorded

pytestmark = pytest.mark.integration

FINISHED = 3_000
"""Finished jobs kept: enough that a scan of them is the dearer plan by far."""
INDEX = "ix_processing_gens_unfinished"


def test_submits_count_running_jobs_on_their_index(
    native_client, native_service, native_db, make_user
):
    requester, owner = make_user("req", 10_000), make_user("wk")
    chat_pop(native_client, owner.api_key)  # one worker online: the chat submit is served
    _keep_finished_jobs(native_service, native_db, requester.id, FINISHED)
    with recorded("processing_gens") as ran:
        submit_chat(native_client, requester.api_key)
        chat_rounds = len(ran)
        queued = native_client.post(
            "/generate/text/async", headers={"apikey": requester.api_key}, json={"prompt": "Hi"}
        )
    assert queued.status_code == 202, queued.text
    assert 0 < chat_rounds < len(ran)  # each submit counted
    scanned, indexed = [], []
    for plan in plans(native_service.context.engine, ran):
        for node in plan_nodes(plan):
            if node.get("Relation Name") == "processing_gens":
                (indexed if node.get("Index Name") == INDEX else scanned).append(node)
    assert indexed
    assert "Seq Scan" not in {node["Node Type"] for node in scanned}


def _keep_finished_jobs(service: Any, native_db: Any, user_id: int, count: int) -> None:
    """``count`` ended requests of ``user_id``, one finished job each, as a busy horde keeps
    them until they expire; then the statistics autovacuum would gather."""
    now = utcnow()
    requests = [
        dict(
            id=uuid.uuid4(), user_id=user_id, prompt="done", params={}, n=0, jobs=1,
            max_length=80, max_context_length=2048, models=[], workers=[], extra_priority=0,
            kudos_estimate=1, created=now, expiry=now + timedelta(minutes=20), active=False,
        )
        for _ in range(count)
    ]  # fmt: skip
    with transaction(native_db) as session:
        worker_id = session.scalars(select(Worker.id)).first()
        session.execute(insert(WaitingPrompt), requests)
        session.execute(
            insert(Generation),
            [
                dict(
                    id=uuid.uuid4(), wp_id=wp["id"], worker_id=worker_id, model="m",
                    start_time=now, ttl=60, gen_metadata=[], generation="a reply",
                )
                for wp in requests
            ],
        )  # fmt: skip
    with service.context.engine.connect() as connection:
        connection.execute(text("ANALYZE processing_gens, waiting_prompts"))
        connection.commit()
