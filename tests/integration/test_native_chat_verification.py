"""Structured submits verified against the stored request: a refusal faults the job on
that worker, the request goes back to the queue, and past the fault limit it faults."""

from __future__ import annotations

import json
import time

import pytest
from redis import Redis

from generated.chat.names import (
    HORDE_CONFORMANCE,
    PARAM_PARALLEL_TOOL_CALLS,
    PARAM_RESPONSE_FORMAT,
    PARAM_TOOL_CHOICE,
    PARAM_TOOLS,
)
from generated.chat.tables import FEATURES, GUARANTEES
from generated.signals import CHAT_SIGNALS
from tests.integration.chat_flow import (
    chat_async,
    chat_body,
    chat_pop,
    chat_status,
    submit_reply,
)
from tests.integration.native_flow import ledger

pytestmark = pytest.mark.integration

EVERYTHING = [*FEATURES, *GUARANTEES]
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def call(call_id: str, name: str = "get_weather") -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_a_refused_reply_faults_the_job_and_requeues_until_the_fault_limit(
    native_client, native_db, native_service, make_user
):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key, features=EVERYTHING)
    body = chat_body("Answer in JSON.", **{PARAM_RESPONSE_FORMAT: {"type": "json_object"}})
    request_id = chat_async(native_client, requester.api_key, body).json()["id"]
    redis = Redis.from_url(native_service.context.settings.redis_url)
    pubsub = redis.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(CHAT_SIGNALS.channel(request_id))
    limit = native_service.context.policy.fault_limit
    for attempt in range(limit + 1):
        job = chat_pop(native_client, worker.api_key, features=EVERYTHING)
        assert job["id"], f"attempt {attempt}: the request should be back in the queue"
        refused = submit_reply(native_client, worker.api_key, job["id"], "not json")
        assert refused.status_code == 400
        assert refused.json()["rc"] == "ChatReplyRejected"
        again = submit_reply(native_client, worker.api_key, job["id"], '{"a": 1}')
        assert again.status_code == 400
        assert again.json()["rc"] == "AbortedGen"
        body = chat_status(native_client, request_id)
        assert body["restarted"] == attempt + 1
        assert body["faulted"] == (attempt == limit)
    assert chat_pop(native_client, worker.api_key, features=EVERYTHING)["id"] is None
    assert not [r for r, _ in ledger(native_db, requester.id) if r == "charge"]
    event = None
    deadline = time.monotonic() + 10
    while event is None and time.monotonic() < deadline:
        message = pubsub.get_message(timeout=1.0)
        event = CHAT_SIGNALS.parse(message["data"]) if message else None
    pubsub.close()
    redis.close()
    assert event == {
        "event": "faulted",
        "id": request_id,
        "outcome": CHAT_SIGNALS.outcome_key(request_id),
    }


def test_a_conforming_reply_after_a_refusal_lands(native_client, make_user):
    requester, first, second = make_user("req", 1000), make_user("a"), make_user("b")
    body = chat_body(**{PARAM_TOOLS: [TOOL], PARAM_TOOL_CHOICE: "required"})
    chat_pop(native_client, first.api_key, "first", features=EVERYTHING)
    request_id = chat_async(native_client, requester.api_key, body).json()["id"]
    job = chat_pop(native_client, first.api_key, "first", features=EVERYTHING)
    missing_call = submit_reply(native_client, first.api_key, job["id"], "I won't call it.")
    assert missing_call.status_code == 400
    job = chat_pop(native_client, second.api_key, "second", features=EVERYTHING)
    ok = submit_reply(native_client, second.api_key, job["id"], None, tool_calls=[call("c1")])
    assert ok.status_code == 200, ok.text
    status = chat_status(native_client, request_id)
    assert status["done"]
    assert not status["faulted"]
    assert status["restarted"] == 1
    gen = status["generations"][0]
    assert gen["worker_name"] == "second"
    assert gen["finish_reason"] == "tool_calls"


@pytest.mark.parametrize("conformance", ["strict", "best_effort"])
def test_calls_outside_the_tools_or_sharing_an_id_are_refused_in_both_modes(
    native_client, make_user, conformance: str
):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key, features=EVERYTHING)
    body = chat_body(**{PARAM_TOOLS: [TOOL], "horde": {HORDE_CONFORMANCE: conformance}})
    chat_async(native_client, requester.api_key, body)
    chat_async(native_client, requester.api_key, body)
    for calls in ([call("c1", "launch_rockets")], [call("c1"), call("c1")]):
        job = chat_pop(native_client, worker.api_key, features=EVERYTHING)
        response = submit_reply(native_client, worker.api_key, job["id"], None, tool_calls=calls)
        assert response.status_code == 400
        assert response.json()["rc"] == "ChatReplyRejected"


def test_parallel_tool_calls_false_keeps_only_the_first_call(native_client, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key, features=EVERYTHING)
    body = chat_body(**{PARAM_TOOLS: [TOOL], PARAM_PARALLEL_TOOL_CALLS: False})
    request_id = chat_async(native_client, requester.api_key, body).json()["id"]
    job = chat_pop(native_client, worker.api_key, features=EVERYTHING)
    calls = [call("c1"), call("c2")]
    response = submit_reply(native_client, worker.api_key, job["id"], None, tool_calls=calls)
    assert response.status_code == 200, response.text
    kept = chat_status(native_client, request_id)["generations"][0]["tool_calls"]
    assert json.dumps(kept) == json.dumps([call("c1")])
