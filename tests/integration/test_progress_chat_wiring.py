"""Delta streaming wired into the native chat routes: a plain streamed chat job gets a lease
at pop, its posts reach the request's stream, the submit finishes the lease, a fault leaves
the ended marker, a cancel settles on the posted text, and a reply that breaks the worker's
own stream is paid and charged for the streamed text (ledger checked)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from sqlalchemy import select

from generated import streaming as S
from generated.chat.tables import FEATURES, GUARANTEES
from generated.pricing import TEXT_MODELS
from runtime.contract.pricing import output_estimate
from runtime.front.progress_stream import relay
from runtime.native.accounts import kudos
from runtime.native.db.tables import WaitingPrompt, Worker
from runtime.native.progress.protocol import ended_kind, posted_text, read_lease
from runtime.native.queue.sweep import sweep, utcnow
from runtime.native.server import NativeService
from tests.conftest import MadeUser
from tests.integration.chat_flow import MODEL, chat_pop, chat_status, submit_chat, submit_reply
from tests.integration.native_flow import ledger

pytestmark = pytest.mark.integration

EVERYTHING = [*FEATURES, *GUARANTEES]


def post(client: httpx.Client, key: str, job_id: str, seq: int, delta: str) -> dict[str, Any]:
    response = client.post(
        "/generate/text/progress",
        headers={"apikey": key},
        json={"id": job_id, "seq": seq, "delta": delta},
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.fixture
def redis(native_service: NativeService, native_db: Any) -> Redis:
    return native_service.context.redis


def streamed_job(
    client: httpx.Client,
    requester: MadeUser,
    worker: MadeUser,
    model: str = MODEL,
    **fields: Any,
) -> tuple[str, dict[str, Any]]:
    chat_pop(client, worker.api_key, model=model, features=EVERYTHING)  # online first
    request_id = submit_chat(client, requester.api_key, model=model, max_tokens=300, **fields)
    return request_id, chat_pop(client, worker.api_key, model=model, features=EVERYTHING)


KNOWN_MODEL = next(iter(TEXT_MODELS))
"""A model the text model reference knows: its reward grows with the reply (an unknown
model's is the context multiplier alone, whatever the reply's length)."""


def price(native_db: Any, request_id: str, reply: dict[str, str], model: str = MODEL) -> Decimal:
    """What ``reply`` costs the request (and pays its worker) on its output estimate."""
    tokens = output_estimate(reply, 300)
    with native_db() as session:
        wp = session.get(WaitingPrompt, uuid.UUID(request_id))
        return kudos.request_reward(wp, tokens, model, trusted=False, bridge_agent="")


def aborted_jobs(native_db: Any, worker: MadeUser) -> int:
    with native_db() as session:
        return int(
            session.scalars(select(Worker).where(Worker.user_id == worker.id)).one().aborted_jobs
        )


def entry_kinds(redis: Redis, request_id: str) -> list[str]:
    return [f[S.ENTRY_KIND] for _id, f in redis.xrange(S.STREAM_KEY.of(request_id))]


def test_plain_streamed_job_is_leased_streamed_and_finished(
    native_client: httpx.Client, redis: Redis, make_user: Callable[..., MadeUser]
) -> None:
    requester, worker = make_user("req", kudos=1000), make_user("wk")
    request_id, job = streamed_job(native_client, requester, worker, stream=True)
    assert job["stream"] is True
    lease = read_lease(redis, job["id"])
    assert lease is not None
    assert lease.request_id == request_id
    post(native_client, worker.api_key, job["id"], 0, "Hello")
    post(native_client, worker.api_key, job["id"], 1, ", wor")
    assert posted_text(redis, request_id) == "Hello, wor"
    response = submit_reply(native_client, worker.api_key, job["id"], "Hello, world!")
    assert response.status_code == 200, response.text
    assert read_lease(redis, job["id"]) is None
    assert entry_kinds(redis, request_id) == [S.KIND_DELTA, S.KIND_DELTA, S.KIND_SUBMITTED]
    assert chat_status(native_client, request_id)["generations"][0]["content"] == "Hello, world!"


@pytest.mark.parametrize(
    "fields", [{}, {"stream": True, "response_format": {"type": "json_object"}}]
)
def test_other_jobs_get_no_lease(
    native_client: httpx.Client,
    redis: Redis,
    make_user: Callable[..., MadeUser],
    fields: dict[str, Any],
) -> None:
    requester, worker = make_user("req", kudos=1000), make_user("wk")
    _request_id, job = streamed_job(native_client, requester, worker, **fields)
    assert job["id"]
    assert job["stream"] is False
    assert read_lease(redis, job["id"]) is None
    refused = native_client.post(
        "/generate/text/progress",
        headers={"apikey": worker.api_key},
        json={"id": job["id"], "seq": 0, "delta": "x"},
    )
    assert (refused.status_code, refused.json()["rc"]) == (404, "ProgressLeaseMissing")


def test_a_faulted_job_leaves_the_ended_marker(
    native_client: httpx.Client, redis: Redis, make_user: Callable[..., MadeUser]
) -> None:
    requester, worker = make_user("req", kudos=1000), make_user("wk")
    request_id, job = streamed_job(native_client, requester, worker, stream=True)
    post(native_client, worker.api_key, job["id"], 0, "Hel")
    response = submit_reply(native_client, worker.api_key, job["id"], None, state="faulted")
    assert response.status_code == 200, response.text
    assert ended_kind(redis, job["id"]) == S.KIND_FAULTED
    assert read_lease(redis, job["id"]) is None
    assert entry_kinds(redis, request_id)[-1] == S.KIND_FAULTED


def test_the_sweep_ends_a_streamed_generation_it_aborts(
    native_client: httpx.Client,
    native_db: Any,
    native_service: NativeService,
    redis: Redis,
    make_user: Callable[..., MadeUser],
) -> None:
    requester, worker = make_user("req", kudos=1000), make_user("wk")
    request_id, job = streamed_job(native_client, requester, worker, stream=True)
    post(native_client, worker.api_key, job["id"], 0, "Half a rep")
    policy = native_service.context.policy
    later = utcnow() + timedelta(seconds=policy.generation_ttl_seconds + 1)
    assert sweep(native_db, policy, now=later, redis=redis).aborted == 1
    assert ended_kind(redis, job["id"]) == S.KIND_FAULTED
    assert read_lease(redis, job["id"]) is None
    assert entry_kinds(redis, request_id) == [S.KIND_DELTA, S.KIND_FAULTED]

    async def relayed() -> list[str]:  # a relay reading that stream ends without blocking on
        client = AsyncRedis.from_url(native_service.context.settings.redis_url or "")
        try:
            return [d.text async for d in relay(client, request_id)]
        finally:
            await client.aclose()

    assert asyncio.run(asyncio.wait_for(relayed(), 5)) == ["Half a rep"]


def test_a_cancel_settles_on_the_posted_text(
    native_client: httpx.Client,
    native_db: Any,
    redis: Redis,
    make_user: Callable[..., MadeUser],
) -> None:
    requester, worker = make_user("req", kudos=1000), make_user("wk")
    request_id, job = streamed_job(native_client, requester, worker, stream=True)
    posted = "Once upon a time, " * 8
    post(native_client, worker.api_key, job["id"], 0, posted)

    cancelled = native_client.delete(f"/generate/chat/status/{request_id}")
    assert cancelled.status_code == 200, cancelled.text

    assert post(native_client, worker.api_key, job["id"], 1, "more") == {
        "last_seq": 0,
        "cancelled": True,
    }
    paid = price(native_db, request_id, {S.STREAMED_REPLY_PART: posted})
    assert ledger(native_db, worker.id) == [("reward", paid)]
    assert ("charge", -paid) in ledger(native_db, requester.id)
    shown = chat_status(native_client, request_id)
    assert [g["content"] for g in shown["generations"]] == [posted]
    assert shown["generations"][0]["kudos"] == float(paid)
    # The worker stops and does not submit; a late submit is refused and pays nothing more.
    late = submit_reply(native_client, worker.api_key, job["id"], posted + "more")
    assert late.status_code == 400
    assert ledger(native_db, worker.id) == [("reward", paid)]


def test_a_cancel_during_reasoning_settles_on_the_posted_reasoning(
    native_client: httpx.Client,
    native_db: Any,
    redis: Redis,
    make_user: Callable[..., MadeUser],
) -> None:
    # Reasoning is generated output, charged with the content (docs/design.md, "Pricing"): a
    # client that leaves while the model still thinks pays for the reasoning posted.
    requester, worker = make_user("req", kudos=1000), make_user("wk")
    request_id, job = streamed_job(native_client, requester, worker, stream=True)
    reasoning = "First I consider the question carefully. " * 4
    response = native_client.post(
        "/generate/text/progress",
        headers={"apikey": worker.api_key},
        json={"id": job["id"], "seq": 0, "delta": "", "reasoning": reasoning},
    )
    assert response.status_code == 200, response.text

    cancelled = native_client.delete(f"/generate/chat/status/{request_id}")
    assert cancelled.status_code == 200, cancelled.text

    reply = {S.STREAMED_REPLY_PART: "", S.STREAMED_REASONING_PART: reasoning}
    tokens = output_estimate(reply, 300)
    assert tokens > output_estimate({S.STREAMED_REPLY_PART: ""}, 300)  # the reasoning counted
    paid = price(native_db, request_id, reply)
    assert ledger(native_db, worker.id) == [("reward", paid)]
    assert ("charge", -paid) in ledger(native_db, requester.id)
    shown = chat_status(native_client, request_id)
    assert [g["reasoning_content"] for g in shown["generations"]] == [reasoning]


def test_a_reply_that_breaks_its_own_stream_is_paid_and_charged_what_was_streamed(
    native_client: httpx.Client,
    native_db: Any,
    redis: Redis,
    make_user: Callable[..., MadeUser],
) -> None:
    # The worker streams 40 characters, then submits another 2,000: its client gets the 40
    # and stream_diverged. Charged and paid for the 40 (as a cancel's settlement), not the
    # 2,000, and the job counts as the worker's fault. Its owner is trusted: the double
    # answers at once, which an untrusted worker is paid for as a smaller model than it
    # claims (kudos.earned), and this test is about what the reward counts, not its speed.
    requester, worker = make_user("req", kudos=1000), make_user("wk", trusted=True)
    request_id, job = streamed_job(native_client, requester, worker, KNOWN_MODEL, stream=True)
    streamed, submitted = "A" * 40, "B" * 2000
    post(native_client, worker.api_key, job["id"], 0, streamed)
    before = ledger(native_db, requester.id)
    response = submit_reply(native_client, worker.api_key, job["id"], submitted)
    assert response.status_code == 200, response.text

    paid = price(native_db, request_id, {S.STREAMED_REPLY_PART: streamed}, KNOWN_MODEL)
    assert paid < price(native_db, request_id, {S.STREAMED_REPLY_PART: submitted}, KNOWN_MODEL)
    assert response.json()["reward"] == float(paid)
    assert ledger(native_db, worker.id) == [("reward", paid)]
    assert ledger(native_db, requester.id)[len(before) :] == [("charge", -paid)]
    assert aborted_jobs(native_db, worker) == 1
    # What the status shows is the reply as submitted, which the front finds diverging.
    assert chat_status(native_client, request_id)["generations"][0]["content"] == submitted


def test_a_reply_extending_its_stream_is_paid_whole(
    native_client: httpx.Client,
    native_db: Any,
    redis: Redis,
    make_user: Callable[..., MadeUser],
) -> None:
    # A trusted owner, as above: the double's instant reply is paid as the model it claims.
    requester, worker = make_user("req", kudos=1000), make_user("wk", trusted=True)
    request_id, job = streamed_job(native_client, requester, worker, KNOWN_MODEL, stream=True)
    post(native_client, worker.api_key, job["id"], 0, "A" * 40)
    reply = "A" * 40 + "B" * 1960
    response = submit_reply(native_client, worker.api_key, job["id"], reply)
    assert response.status_code == 200, response.text
    paid = price(native_db, request_id, {S.STREAMED_REPLY_PART: reply}, KNOWN_MODEL)
    assert ledger(native_db, worker.id) == [("reward", paid)]
    assert aborted_jobs(native_db, worker) == 0
