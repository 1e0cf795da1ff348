"""The prompt screen on text requests as on chat ones, with its default rules at shipped
settings, and upstream's IP timeout (horde/countermeasures.py) on a source that sends corrupt
prompts."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from generated.moderation import FIRST_TIMEOUT_MINUTES, SUSPICION_MEMORY_SECONDS, TIMEOUT_KEY
from generated.routes import HEADER_X_HORDE_SERVICE_PASSKEY
from runtime.native.db.tables import User, WaitingPrompt
from tests.conftest import SERVICE_PASSKEY
from tests.integration.chat_flow import chat_async, chat_body, chat_pop
from tests.support.moderation import REFUSED_PROMPT

pytestmark = pytest.mark.integration

TEXT = "/generate/text/async"
HERE = "127.0.0.1"


def text(client: httpx.Client, api_key: str, prompt: str, **headers: str) -> httpx.Response:
    body = {"prompt": prompt, "params": {"max_length": 80}}
    return client.post(TEXT, headers={"apikey": api_key, **headers}, json=body)


def forwarded(address: str) -> dict[str, str]:
    """Headers of a call the front makes for a client at ``address``."""
    return {HEADER_X_HORDE_SERVICE_PASSKEY: SERVICE_PASSKEY, "X-Forwarded-For": address}


def queued(sessions: Any) -> int:
    with sessions() as session:
        return int(session.scalar(select(func.count()).select_from(WaitingPrompt)))


@pytest.mark.raised_limits("text_async", "chat_async", why="one source's submits in a row")
def test_a_corrupt_text_prompt_is_refused_and_its_source_timed_out(
    native_client, native_db, make_user
):
    alice, bob, worker = make_user("alice", 100), make_user("bob", 100), make_user("worker")
    chat_pop(native_client, worker.api_key)
    refused = text(native_client, alice.api_key, f"A story.\n{REFUSED_PROMPT}")
    assert (refused.status_code, refused.json()["rc"]) == (400, "CorruptPrompt")
    assert queued(native_db) == 0
    with native_db() as session:
        assert session.get(User, alice.id).kudos == 100  # nothing charged
    for timed_out in (
        text(native_client, bob.api_key, "An ordinary prompt."),
        chat_async(native_client, bob.api_key, chat_body("An ordinary question.")),
    ):
        assert (timed_out.status_code, timed_out.json()["rc"]) == (403, "TimeoutIP")
        wait = float(timed_out.headers["retry-after"])
        assert FIRST_TIMEOUT_MINUTES * 60 - 30 < wait <= FIRST_TIMEOUT_MINUTES * 60
    elsewhere = text(native_client, bob.api_key, "An ordinary prompt.", **forwarded("192.0.2.1"))
    assert elsewhere.status_code == 202
    assert queued(native_db) == 1


@pytest.mark.raised_limits("text_async", why="one source's refusals in a row")
def test_each_refusal_within_the_memory_times_the_source_out_longer(
    native_service, native_client, make_user
):
    alice = make_user("alice", 100)
    redis = native_service.context.redis
    for earlier in range(3):
        if earlier:  # as if the timeout had run out
            redis.delete(TIMEOUT_KEY.format(source=HERE))
        refused = text(native_client, alice.api_key, REFUSED_PROMPT)
        assert refused.json()["rc"] == "CorruptPrompt"
        minutes = FIRST_TIMEOUT_MINUTES * (2 * earlier + 1)  # 3, 9, 15
        left = redis.ttl(TIMEOUT_KEY.format(source=HERE))
        assert minutes * 60 - 30 < left <= minutes * 60
    memory = redis.ttl(f"horde:countermeasures:suspicion:{HERE}")
    assert SUSPICION_MEMORY_SECONDS - 30 < memory <= SUSPICION_MEMORY_SECONDS


@pytest.mark.raised_limits("chat_async", why="one client's submits through the front's address")
def test_behind_the_front_the_client_is_timed_out_not_the_front(native_client, make_user):
    alice, worker = make_user("alice", 100), make_user("worker")
    chat_pop(native_client, worker.api_key)
    corrupt = chat_async(
        native_client, alice.api_key, chat_body(REFUSED_PROMPT), **forwarded("198.51.100.4")
    )
    assert corrupt.json()["rc"] == "CorruptPrompt"
    again = chat_async(native_client, alice.api_key, chat_body("Hi"), **forwarded("198.51.100.4"))
    assert (again.status_code, again.json()["rc"]) == (403, "TimeoutIP")
    other = chat_async(native_client, alice.api_key, chat_body("Hi"), **forwarded("198.51.100.5"))
    assert other.status_code == 202


def test_the_operators_patterns_screen_text_requests_too(native_client, make_user):
    alice = make_user("alice", 100)
    refused = text(native_client, alice.api_key, "a forbidden-word here")  # tests/conftest.py's
    assert (refused.status_code, refused.json()["rc"]) == (400, "CorruptPrompt")
