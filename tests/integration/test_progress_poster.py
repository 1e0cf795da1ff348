"""The worker's ProgressPoster against the live progress route: it posts exactly the text
after what the Horde accepted, resyncs after a lost acknowledgement, stops at the cap and
reports the cancel."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
from redis import Redis

from generated import streaming as S
from runtime.native.accounts.keys import hash_key, new_api_key
from runtime.native.progress.protocol import (
    mark_cancelled,
    posted,
    posted_text,
    read_lease,
    write_lease,
)
from runtime.native.server import NativeService
from runtime.worker.progress_poster import ProgressPoster

pytestmark = pytest.mark.integration


class Leased:
    def __init__(self, redis: Redis) -> None:
        self.generation_id = str(uuid.uuid4())
        self.request_id = str(uuid.uuid4())
        self.api_key = new_api_key()
        write_lease(redis, self.generation_id, self.request_id, hash_key(self.api_key), 150)


@pytest.fixture
def redis(native_service: NativeService, native_db: object) -> Redis:
    return native_service.context.redis


@pytest.fixture
def leased(redis: Redis) -> Leased:
    return Leased(redis)


@pytest.fixture
def worker_http(native_service: NativeService, leased: Leased) -> Iterator[httpx.Client]:
    """Like the worker's HordeClient: the server's root, the worker's key on every call."""
    headers = {"apikey": leased.api_key}
    with httpx.Client(base_url=native_service.url, headers=headers) as client:
        yield client


def test_posts_each_delta_once(redis: Redis, leased: Leased, worker_http: httpx.Client) -> None:
    poster = ProgressPoster(worker_http, leased.generation_id)
    assert [poster(d) for d in ["Once ", "upon ", "a time"]] == [False, False, False]
    assert posted_text(redis, leased.request_id) == "Once upon a time"
    assert poster.next_seq == 3


def test_resyncs_after_a_lost_acknowledgement(
    redis: Redis, leased: Leased, worker_http: httpx.Client
) -> None:
    poster = ProgressPoster(worker_http, leased.generation_id)
    assert poster("Hello ") is False
    # The next post lands but its acknowledgement is lost: the Horde holds seq 1 and
    # "world", the poster does not know it and later posts "world, again" as seq 1.
    landed = worker_http.post(
        "/api/v2/generate/text/progress",
        json={"id": leased.generation_id, "seq": 1, "delta": "world"},
    )
    assert landed.status_code == 200
    poster.text += "world"
    assert poster(", again") is False
    assert posted_text(redis, leased.request_id) == "Hello world, again"
    assert poster.next_seq == 3


def test_stops_at_the_cap_and_keeps_generating(
    redis: Redis, leased: Leased, worker_http: httpx.Client
) -> None:
    poster = ProgressPoster(worker_http, leased.generation_id)
    assert poster("a" * (S.GENERATION_CHARS - 1)) is False
    assert poster("bb") is False
    assert poster.stopped
    assert poster("c") is False  # no more posts, still not cancelled
    assert poster.text.endswith("bbc")
    assert len(posted_text(redis, leased.request_id)) == S.GENERATION_CHARS - 1


def test_reports_the_cancel(redis: Redis, leased: Leased, worker_http: httpx.Client) -> None:
    poster = ProgressPoster(worker_http, leased.generation_id)
    assert poster("Hello") is False
    mark_cancelled(redis, leased.generation_id)
    assert poster(" world") is True
    assert poster("!") is True
    assert posted_text(redis, leased.request_id) == "Hello"


def test_reasoning_posts_on_its_own_channel_and_resyncs_on_its_own_cursor(
    redis: Redis, leased: Leased, worker_http: httpx.Client
) -> None:
    poster = ProgressPoster(worker_http, leased.generation_id)
    assert poster("", "Let me think.") is False
    # A post with reasoning and content lands but its acknowledgement is lost.
    landed = worker_http.post(
        "/api/v2/generate/text/progress",
        json={"id": leased.generation_id, "seq": 1, "delta": "The", "reasoning": " Done."},
    )
    assert landed.status_code == 200
    poster.text += "The"
    poster.reasoning += " Done."
    assert poster(" answer.") is False
    sent = posted(redis, leased.request_id)
    assert (sent.reasoning, sent.content) == ("Let me think. Done.", "The answer.")
    lease = read_lease(redis, leased.generation_id)
    assert lease is not None
    assert (lease.chars, lease.reasoning_chars) == (len("The answer."), len("Let me think. Done."))


def test_the_cap_counts_reasoning_and_content_together(
    redis: Redis, leased: Leased, worker_http: httpx.Client
) -> None:
    poster = ProgressPoster(worker_http, leased.generation_id)
    assert poster("", "r" * (S.GENERATION_CHARS - 1)) is False
    assert poster("cc") is False
    assert poster.stopped
    assert posted_text(redis, leased.request_id) == ""
