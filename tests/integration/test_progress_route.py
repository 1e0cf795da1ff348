"""POST /generate/text/progress through the live native app, with leases written directly
(as chat pop writes them for plain streamed jobs): acknowledgements, the seq gap and its
resync, the cap, cancel, the ended marker, expiry settings and no Postgres on the route."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from redis import Redis

from generated import streaming as S
from runtime.native.accounts.keys import ANONYMOUS_API_KEY, hash_key, new_api_key
from runtime.native.progress.protocol import (
    cancel_request,
    ended_kind,
    finish,
    mark_cancelled,
    mark_ended,
    posted_text,
    read_lease,
    write_lease,
)
from runtime.native.server import NativeService
from tests.support.native import statements_sent

pytestmark = pytest.mark.integration

GENERATION_TTL = 150


class Job:
    """A streamed generation with a lease: its ids and the worker's key."""

    def __init__(self, redis: Redis, api_key: str | None = None) -> None:
        self.redis = redis
        self.generation_id = str(uuid.uuid4())
        self.request_id = str(uuid.uuid4())
        self.api_key = api_key or new_api_key()
        write_lease(redis, self.generation_id, self.request_id, hash_key(self.api_key), 150)

    def post(
        self, client: httpx.Client, seq: int, delta: str, api_key: str | None = None
    ) -> httpx.Response:
        return client.post(
            "/generate/text/progress",
            headers={"apikey": api_key or self.api_key},
            json={"id": self.generation_id, "seq": seq, "delta": delta},
        )

    def entries(self) -> list[dict[str, Any]]:
        return [fields for _id, fields in self.redis.xrange(S.STREAM_KEY.of(self.request_id))]


@pytest.fixture
def redis(native_service: NativeService, native_db: Any) -> Redis:
    return native_service.context.redis


@pytest.fixture
def job(redis: Redis) -> Job:
    return Job(redis)


def test_posts_are_acknowledged_and_appended_in_order(
    native_client: httpx.Client, job: Job
) -> None:
    for seq, delta in enumerate(["Once ", "upon ", "a time"]):
        response = job.post(native_client, seq, delta)
        assert response.status_code == 200, response.text
        assert response.json() == {"last_seq": seq, "cancelled": False}
    assert [e[S.ENTRY_DELTA] for e in job.entries()] == ["Once ", "upon ", "a time"]
    assert [e[S.ENTRY_SEQ] for e in job.entries()] == ["0", "1", "2"]
    assert {e[S.ENTRY_GENERATION_ID] for e in job.entries()} == {job.generation_id}
    assert posted_text(job.redis, job.request_id) == "Once upon a time"


def test_seq_gap_is_409_with_the_last_seq_and_the_worker_resyncs(
    native_client: httpx.Client, job: Job
) -> None:
    assert job.post(native_client, 0, "one ").status_code == 200
    gap = job.post(native_client, 2, "three ")
    assert gap.status_code == 409
    assert gap.json()["rc"] == "ProgressOutOfOrder"
    assert (gap.json()["last_seq"], gap.json()["posted_chars"]) == (0, len("one "))
    resync = job.post(native_client, gap.json()["last_seq"] + 1, "two three ")
    assert resync.json() == {"last_seq": 1, "cancelled": False}
    # A retry of an accepted post (its acknowledgement lost) and a post from the past are
    # gaps too: nothing is appended twice, and the body says where the worker resumes.
    again = job.post(native_client, 1, "two three four")
    assert again.status_code == 409
    assert (again.json()["last_seq"], again.json()["posted_chars"]) == (1, len("one two three "))
    assert job.post(native_client, 0, "one ").status_code == 409
    assert posted_text(job.redis, job.request_id) == "one two three "


def test_first_post_must_be_seq_zero(native_client: httpx.Client, job: Job) -> None:
    response = job.post(native_client, 1, "x")
    assert response.status_code == 409
    assert (response.json()["last_seq"], response.json()["posted_chars"]) == (-1, 0)
    assert job.entries() == []


def test_cap_is_413_then_posts_stop_and_the_worker_still_submits(
    native_client: httpx.Client, job: Job
) -> None:
    assert job.post(native_client, 0, "a" * (S.GENERATION_CHARS - 1)).status_code == 200
    over = job.post(native_client, 1, "bb")
    assert over.status_code == 413
    assert over.json()["rc"] == "ProgressCapReached"
    assert str(S.GENERATION_CHARS) in over.json()["message"]
    # Posts stop for good, even one that would fit.
    assert job.post(native_client, 1, "b").status_code == 413
    assert len(posted_text(job.redis, job.request_id)) == S.GENERATION_CHARS - 1
    assert finish(job.redis, job.generation_id) is True
    assert read_lease(job.redis, job.generation_id) is None
    assert job.entries()[-1][S.ENTRY_KIND] == S.KIND_SUBMITTED


def test_cancel_flag_is_in_the_next_ack_and_nothing_more_is_appended(
    native_client: httpx.Client, job: Job
) -> None:
    assert job.post(native_client, 0, "Hello").status_code == 200
    assert cancel_request(job.redis, job.request_id) == [job.generation_id]
    ack = job.post(native_client, 1, " world")
    assert ack.status_code == 200
    assert ack.json() == {"last_seq": 0, "cancelled": True}
    assert posted_text(job.redis, job.request_id, job.generation_id) == "Hello"
    assert [e[S.ENTRY_KIND] for e in job.entries()] == [S.KIND_DELTA, S.KIND_CANCELLED]
    assert mark_cancelled(job.redis, job.generation_id) is False  # settled once


def test_a_faulted_generation_leaves_an_ended_marker(native_client: httpx.Client, job: Job) -> None:
    assert job.post(native_client, 0, "partial").status_code == 200
    assert mark_ended(job.redis, job.generation_id) is True
    assert ended_kind(job.redis, job.generation_id) == S.KIND_FAULTED
    assert 0 < job.redis.ttl(S.ENDED_KEY.of(job.generation_id)) <= S.ENDED_MARKER_SECONDS
    response = job.post(native_client, 1, "more")
    assert response.status_code == 404
    assert response.json()["rc"] == "ProgressLeaseMissing"
    assert job.entries()[-1] == {
        S.ENTRY_KIND: S.KIND_FAULTED,
        S.ENTRY_GENERATION_ID: job.generation_id,
    }
    assert job.redis.smembers(S.REQUEST_LEASES_KEY.of(job.request_id)) == set()


def test_expiry_settings_are_applied(native_client: httpx.Client, job: Job) -> None:
    lease_life = GENERATION_TTL + S.LEASE_GRACE_SECONDS
    assert GENERATION_TTL < job.redis.ttl(S.LEASE_KEY.of(job.generation_id)) <= lease_life
    assert GENERATION_TTL < job.redis.ttl(S.REQUEST_LEASES_KEY.of(job.request_id)) <= lease_life
    assert job.post(native_client, 0, "x").status_code == 200
    stream_ttl = job.redis.ttl(S.STREAM_KEY.of(job.request_id))
    assert S.STREAM_SECONDS - S.LEASE_GRACE_SECONDS < stream_ttl <= S.STREAM_SECONDS
    assert finish(job.redis, job.generation_id) is True
    assert job.redis.exists(S.LEASE_KEY.of(job.generation_id)) == 0
    assert 0 < job.redis.ttl(S.STREAM_KEY.of(job.request_id)) <= S.STREAM_SECONDS


def test_refusals(native_client: httpx.Client, job: Job, redis: Redis) -> None:
    wrong = job.post(native_client, 0, "x", api_key=new_api_key())
    assert (wrong.status_code, wrong.json()["rc"]) == (403, "WrongCredentials")
    anon = job.post(native_client, 0, "x", api_key=ANONYMOUS_API_KEY)
    assert (anon.status_code, anon.json()["rc"]) == (403, "AnonForbiddenWorker")
    unknown = Job(redis)
    redis.delete(S.LEASE_KEY.of(unknown.generation_id))
    missing = unknown.post(native_client, 0, "x")
    assert (missing.status_code, missing.json()["rc"]) == (404, "ProgressLeaseMissing")
    bad_id = native_client.post(
        "/generate/text/progress",
        headers={"apikey": job.api_key},
        json={"id": "not-a-generation", "seq": 0, "delta": "x"},
    )
    assert (bad_id.status_code, bad_id.json()["rc"]) == (404, "InvalidJobID")
    negative = job.post(native_client, -1, "x")
    assert (negative.status_code, negative.json()["rc"]) == (400, "InvalidPayload")
    no_key = native_client.post(
        "/generate/text/progress", json={"id": job.generation_id, "seq": 0, "delta": "x"}
    )
    assert no_key.status_code == 400
    assert job.entries() == []


@pytest.fixture
def statements(native_service: NativeService) -> Iterator[list[str]]:
    """Every SQL statement the native app runs while the fixture is active."""
    with statements_sent(native_service) as seen:
        yield seen


def test_the_route_reads_no_postgres(
    native_client: httpx.Client, job: Job, statements: list[str]
) -> None:
    # The worker's key exists only as the lease's owner digest: no user row holds it.
    assert job.post(native_client, 0, "a").status_code == 200
    assert job.post(native_client, 2, "c").status_code == 409
    assert job.post(native_client, 1, "b", api_key=new_api_key()).status_code == 403
    mark_cancelled(job.redis, job.generation_id)
    assert job.post(native_client, 1, "b").json()["cancelled"] is True
    assert statements == []
