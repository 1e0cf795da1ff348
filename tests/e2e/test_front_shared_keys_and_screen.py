"""Through the front with the official openai SDK: a shared key works as the bearer token
(spending its owner's kudos and its own limit) and its refusals arrive as OpenAI errors; a
corrupt prompt is refused and times its client out, in OpenAI's envelope."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from typing import Any

import openai
import pytest

from runtime.front.server import FrontService
from runtime.native.db.tables import SharedKey, User
from tests.support.chat_worker import ChatTestWorker
from tests.support.moderation import REFUSED_PROMPT
from tests.support.openai_schema import assert_completion, assert_error

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

MODEL = "shared-key-model"


def ask(front: FrontService, api_key: str, content: str = "Say hello") -> dict[str, Any]:
    """The completion's body, checked against OpenAI's schema."""
    with openai.OpenAI(base_url=f"{front.url}/v1", api_key=api_key, max_retries=0) as sdk:
        raw = sdk.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": content}]
        )
    body = dict(json.loads(raw.content))
    assert_completion(body)
    return body


@pytest.mark.raised_limits("chat_async", why="the key's completion, then its refusal")
def test_a_shared_key_is_a_bearer_token_within_its_limits(
    front, native_url, native_client, native_db, make_user
):
    owner, worker = make_user("owner", kudos=1000), make_user("worker")
    made = native_client.put("/sharedkeys", headers={"apikey": owner.api_key}, json={"kudos": 50})
    key = made.json()["id"]
    with ChatTestWorker(native_url, worker.api_key, model=MODEL):
        answer = ask(front, key)
        with native_db() as session:
            spent = session.get(SharedKey, uuid.UUID(key))
            assert spent.utilized == Decimal(str(answer["x_horde"]["kudos"])) > 0
            assert spent.kudos == 50 - spent.utilized
            assert session.get(User, owner.id).kudos == 1000 - spent.utilized
        native_client.patch(
            f"/sharedkeys/{key}", headers={"apikey": owner.api_key}, json={"kudos": 0}
        )
        with pytest.raises(openai.APIStatusError) as spent_key:
            ask(front, key)
    assert spent_key.value.status_code == 402
    assert spent_key.value.body["code"] == "SharedKeyEmpty"
    assert_error(spent_key.value.response.json())


@pytest.mark.raised_limits("chat_async", why="a refusal, then the timed-out client's retry")
def test_a_corrupt_prompt_times_the_client_out_in_openais_envelope(front, native_url, make_user):
    alice, worker = make_user("alice", kudos=1000), make_user("worker")
    with ChatTestWorker(native_url, worker.api_key, model=MODEL):
        with pytest.raises(openai.BadRequestError) as corrupt:
            ask(front, alice.api_key, REFUSED_PROMPT)
        with pytest.raises(openai.PermissionDeniedError) as timed_out:
            ask(front, alice.api_key)
    assert corrupt.value.body["code"] == "CorruptPrompt"
    assert timed_out.value.body["code"] == "TimeoutIP"
    assert int(timed_out.value.response.headers["retry-after"]) > 0
    for refusal in (corrupt, timed_out):
        assert_error(refusal.value.response.json())
