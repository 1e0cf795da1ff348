"""A cancelled streamed generation is settled on the content posted before the cancel:
the worker paid, the requester charged (ledger checked), not a dropped job. The job is
popped through the live native API and its lease written directly, as chat pop will."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from generated.streaming import STREAMED_REPLY_PART
from runtime.contract.pricing import output_estimate
from runtime.native.accounts import kudos
from runtime.native.accounts.keys import hash_key
from runtime.native.db.tables import Generation, WaitingPrompt, Worker
from runtime.native.progress.protocol import write_lease
from runtime.native.progress.settlement import settle_cancelled_streams
from runtime.native.queue.sweep import utcnow
from runtime.native.requests.text import cancel_text_request, get_text_request
from runtime.native.server import NativeService
from runtime.stores.database import transaction
from tests.conftest import MadeUser
from tests.integration.native_flow import ledger, pop, status, submit_text

pytestmark = pytest.mark.integration

MODEL = "test-model-7B"


def post(client: httpx.Client, key: str, job_id: str, seq: int, delta: str) -> dict[str, Any]:
    response = client.post(
        "/generate/text/progress",
        headers={"apikey": key},
        json={"id": job_id, "seq": seq, "delta": delta},
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def cancel(service: NativeService, sessions: sessionmaker[Session], request_id: str) -> list[Any]:
    with transaction(sessions) as session:
        wp = get_text_request(session, request_id, lock=True)
        settled = settle_cancelled_streams(session, service.context.redis, wp, utcnow())
        cancel_text_request(session, wp)
    return settled


def streamed_job(
    client: httpx.Client, service: NativeService, requester: MadeUser, worker: MadeUser
) -> tuple[str, str]:
    request_id = submit_text(client, requester.api_key, max_length=200)
    job = pop(client, worker.api_key, models=[MODEL])
    write_lease(service.context.redis, job["id"], request_id, hash_key(worker.api_key), job["ttl"])
    return request_id, job["id"]


def test_cancel_settles_on_the_posted_text(
    native_client: httpx.Client,
    native_service: NativeService,
    native_db: sessionmaker[Session],
    make_user: Callable[..., MadeUser],
) -> None:
    requester = make_user("requester", kudos=500)
    worker = make_user("volunteer")
    request_id, job_id = streamed_job(native_client, native_service, requester, worker)
    posted = "The quick brown fox " * 6
    post(native_client, worker.api_key, job_id, 0, posted[:50])
    post(native_client, worker.api_key, job_id, 1, posted[50:])

    settled = cancel(native_service, native_db, request_id)

    tokens = output_estimate({STREAMED_REPLY_PART: posted}, 200)
    with native_db() as session:
        wp = session.get(WaitingPrompt, uuid.UUID(request_id))
        price = kudos.request_reward(wp, tokens, MODEL, trusted=False, bridge_agent="")
    assert [(s.generation_id, s.text, s.tokens) for s in settled] == [(job_id, posted, tokens)]
    assert ledger(native_db, worker.id) == [("reward", price)]
    assert ("charge", -price) in ledger(native_db, requester.id)
    # The worker's next post learns of the cancel; nothing more is appended or paid.
    assert post(native_client, worker.api_key, job_id, 2, "jumps") == {
        "last_seq": 1,
        "cancelled": True,
    }
    with native_db() as session:
        gen = session.get(Generation, uuid.UUID(job_id))
        assert gen is not None
        assert (gen.generation, gen.cancelled, gen.faulted, gen.aborted) == (
            posted,
            True,
            False,
            False,
        )
        assert (gen.reward, gen.charge) == (price, price)
        volunteer = session.scalars(select(Worker).where(Worker.user_id == worker.id)).one()
        assert volunteer.aborted_jobs == 0
        assert volunteer.kudos == price
    shown = status(native_client, request_id)
    assert [g["text"] for g in shown["generations"]] == [posted]
    # A retried cancel settles nothing twice.
    assert cancel(native_service, native_db, request_id) == []
    assert ledger(native_db, worker.id) == [("reward", price)]


def test_a_cancel_before_any_post_pays_nothing(
    native_client: httpx.Client,
    native_service: NativeService,
    native_db: sessionmaker[Session],
    make_user: Callable[..., MadeUser],
) -> None:
    requester = make_user("requester", kudos=500)
    worker = make_user("volunteer")
    request_id, job_id = streamed_job(native_client, native_service, requester, worker)
    before = ledger(native_db, requester.id)

    assert cancel(native_service, native_db, request_id) == []

    assert ledger(native_db, worker.id) == []
    assert [r for r in ledger(native_db, requester.id) if r[0] == "charge"] == [
        r for r in before if r[0] == "charge"
    ]
    with native_db() as session:
        gen = session.get(Generation, uuid.UUID(job_id))
        assert gen is not None
        assert (gen.generation, gen.cancelled, gen.reward) == (None, True, Decimal(0))
