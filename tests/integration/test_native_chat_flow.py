"""Chat requests through the live native API: the round trip, pricing, route families,
who gets chat jobs, what a job carries, and the completion signal."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg import pq
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from generated.chat.names import (
    FEATURE_REASONING,
    HORDE_CONFORMANCE,
    PARAM_MAX_TOKENS,
    PARAM_REASONING_EFFORT,
    PARAM_TOOL_CHOICE,
    PARAM_TOOLS,
    ROLE_DEVELOPER,
    ROLE_SYSTEM,
)
from generated.chat.tables import FEATURES, GUARANTEES, PARAMETERS, SAMPLING_DEFAULTS
from generated.routes import HEADER_APIKEY, HEADER_CLIENT_AGENT, HEADER_X_OPERATION_KEY
from generated.signals import CHAT_SIGNALS, WAKE_CHANNEL
from generated.wire import STATE_CENSORED, STATE_FAULTED
from runtime.contract.pricing import output_estimate
from runtime.native.accounts import kudos
from runtime.native.api import chat_views, worker_views
from runtime.native.db.tables import WaitingPrompt
from runtime.native.queue import jobs
from tests.integration.chat_flow import (
    MODEL,
    chat_async,
    chat_body,
    chat_pop,
    chat_pop_body,
    chat_status,
    submit_chat,
    submit_reply,
)
from tests.integration.native_flow import ledger, pop, status, submit_text

pytestmark = pytest.mark.integration

EVERYTHING = [*FEATURES, *GUARANTEES]
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
OTHER_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object"}},
}


def test_round_trip_charges_the_output_estimate_and_shows_reported_usage(
    native_client, native_db, make_user
):
    requester, worker = make_user("req", kudos=1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    request_id = submit_chat(native_client, requester.api_key, max_tokens=300)
    job = chat_pop(native_client, worker.api_key)
    assert job["id"]
    assert job["is_chat"] is True
    assert "prompt" not in job["payload"]
    reply = "x" * 400
    usage = {"prompt_tokens": 12, "completion_tokens": 9999}
    response = submit_reply(native_client, worker.api_key, job["id"], reply, usage=usage)
    assert response.status_code == 200, response.text

    body = chat_status(native_client, request_id)
    assert body["done"]
    assert body["finished"] == 1
    assert body["charge_basis"] == "output_estimate"
    gen = body["generations"][0]
    assert gen["content"] == reply
    assert gen["model"] == MODEL
    assert gen["finish_reason"] == "stop"
    assert gen["usage"] == {**usage, "reasoning_tokens": None}
    tokens = output_estimate({"content": reply}, 300)
    assert tokens == 100  # 400 characters / 4, not the reported 9999
    with native_db() as session:
        from runtime.native.db.tables import WaitingPrompt

        wp = session.get(WaitingPrompt, request_id)
        expected = kudos.request_reward(wp, tokens, MODEL, trusted=False, bridge_agent="")
    assert gen["kudos"] == float(expected) == response.json()["reward"]
    charges = [d for reason, d in ledger(native_db, requester.id) if reason == "charge"]
    assert charges == [-expected]


def test_chat_and_text_ids_are_not_found_on_each_others_routes(native_client, make_user):
    requester, worker = make_user("req", kudos=1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    chat_id = submit_chat(native_client, requester.api_key)
    text_id = submit_text(native_client, requester.api_key)
    assert native_client.get(f"/generate/text/status/{chat_id}").status_code == 404
    assert native_client.delete(f"/generate/text/status/{chat_id}").status_code == 404
    assert native_client.get(f"/generate/chat/status/{text_id}").json()["rc"] == "RequestNotFound"
    assert native_client.delete(f"/generate/chat/status/{text_id}").status_code == 404
    assert status(native_client, text_id)["waiting"] == 1
    assert chat_status(native_client, chat_id)["waiting"] == 1


def test_status_and_cancel_routes_refuse_a_header_over_its_schema(native_client, make_user):
    """Found by schemathesis's stateful phase: a Client-Agent over its maxLength
    was refused on the submits but answered 200 on a status read or a cancel of a known id."""
    requester, worker = make_user("req", kudos=1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    submitted = chat_async(
        native_client, requester.api_key, chat_body(), **{HEADER_X_OPERATION_KEY: "hdr-1"}
    )
    assert submitted.status_code == 202, submitted.text
    chat_id = submitted.json()["id"]
    text_id = submit_text(native_client, requester.api_key)
    long_agent = {HEADER_CLIENT_AGENT: "a" * 1001, HEADER_APIKEY: requester.api_key}
    for method, path in [
        ("GET", f"/generate/text/status/{text_id}"),
        ("DELETE", f"/generate/text/status/{text_id}"),
        ("GET", f"/generate/chat/status/{chat_id}"),
        ("DELETE", f"/generate/chat/status/{chat_id}"),
        ("DELETE", "/generate/chat/operation/hdr-1"),
    ]:
        refused = native_client.request(method, path, headers=long_agent)
        assert refused.status_code == 400, (method, path, refused.text)
        assert refused.json()["rc"] == "InvalidPayload"
        assert refused.json()["param"] == HEADER_CLIENT_AGENT
    assert status(native_client, text_id)["waiting"] == 1  # nothing was cancelled
    assert chat_status(native_client, chat_id)["waiting"] == 1


def test_a_pre_chat_worker_never_gets_a_chat_job(native_client, make_user):
    requester, chat_worker, old_worker = make_user("req", 1000), make_user("c"), make_user("o")
    chat_pop(native_client, chat_worker.api_key)
    request_id = submit_chat(native_client, requester.api_key)
    job = pop(native_client, old_worker.api_key, name="old", models=[MODEL])
    assert job["id"] is None
    assert chat_status(native_client, request_id)["waiting"] == 1
    text_id = submit_text(native_client, requester.api_key)
    job = pop(native_client, old_worker.api_key, name="old", models=[MODEL])
    assert job["id"]
    assert "prompt" in job["payload"]
    assert status(native_client, text_id)["processing"] == 1


def test_a_chat_worker_keeps_getting_text_jobs_unless_prompt_jobs_is_false(
    native_client, make_user
):
    requester, worker = make_user("req", 1000), make_user("wk")
    submit_text(native_client, requester.api_key)
    assert chat_pop(native_client, worker.api_key, "chat-only", prompt_jobs=False)["id"] is None
    job = chat_pop(native_client, worker.api_key, "both")
    assert job["id"]
    assert job["is_chat"] is False
    assert job["payload"]["prompt"]


def test_the_job_carries_every_sampling_field_and_developer_as_system(native_client, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    messages = [
        {"role": ROLE_DEVELOPER, "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    chat_async(native_client, requester.api_key, {"model": MODEL, "messages": messages})
    payload = chat_pop(native_client, worker.api_key)["payload"]
    assert payload["messages"][0] == {"role": ROLE_SYSTEM, "content": "Be brief."}
    # An omitted output length is filled with the worker's declared length (512 here).
    assert payload[PARAM_MAX_TOKENS] == 512
    for key, default in SAMPLING_DEFAULTS.items():
        assert key in payload
        assert key == PARAM_MAX_TOKENS or payload[key] == default
    assert PARAM_REASONING_EFFORT not in payload


def test_reasoning_effort_defaults_to_medium_for_a_reasoning_worker(native_client, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    features = [*EVERYTHING]
    chat_pop(native_client, worker.api_key, features=features)
    submit_chat(native_client, requester.api_key)
    payload = chat_pop(native_client, worker.api_key, features=features)["payload"]
    assert FEATURE_REASONING in features
    assert payload[PARAM_REASONING_EFFORT] == PARAMETERS[PARAM_REASONING_EFFORT]["default"]


@pytest.mark.parametrize(
    ("choice", "sent_tools", "sent_choice"),
    [
        ("none", None, None),
        ({"type": "function", "function": {"name": "get_time"}}, [OTHER_TOOL], "required"),
    ],
)
def test_dispatch_narrows_tools_and_the_status_keeps_the_clients_values(
    native_client, native_db, make_user, choice: Any, sent_tools: Any, sent_choice: Any
):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key, features=EVERYTHING)
    body = chat_body(**{PARAM_TOOLS: [TOOL, OTHER_TOOL], PARAM_TOOL_CHOICE: choice})
    request_id = chat_async(native_client, requester.api_key, body).json()["id"]
    payload = chat_pop(native_client, worker.api_key, features=EVERYTHING)["payload"]
    assert payload.get(PARAM_TOOLS) == sent_tools
    assert payload.get(PARAM_TOOL_CHOICE) == sent_choice
    with native_db() as session:
        stored = session.get(WaitingPrompt, request_id).chat_request
    assert stored[PARAM_TOOLS] == [TOOL, OTHER_TOOL]
    assert stored[PARAM_TOOL_CHOICE] == choice


def test_completion_signal_on_generation_done_and_cancel(native_client, native_service, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    request_id = submit_chat(native_client, requester.api_key)
    cancelled_id = submit_chat(native_client, requester.api_key, content="Another")
    redis = Redis.from_url(native_service.context.settings.redis_url)
    pubsub = redis.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(CHAT_SIGNALS.channel(request_id), CHAT_SIGNALS.channel(cancelled_id))
    job = chat_pop(native_client, worker.api_key)
    assert submit_reply(native_client, worker.api_key, job["id"], "Done.").status_code == 200
    native_client.delete(f"/generate/chat/status/{cancelled_id}")
    received: list[tuple[str, dict[str, Any]]] = []
    deadline = time.monotonic() + 10
    while len(received) < 3 and time.monotonic() < deadline:
        message = pubsub.get_message(timeout=1.0)
        if message is not None:
            received.append((message["channel"].decode(), CHAT_SIGNALS.parse(message["data"])))
    outcome = redis.get(CHAT_SIGNALS.outcome_key(request_id))  # the final status, stored first
    pubsub.close()
    redis.close()
    assert outcome is not None
    final = json.loads(outcome)
    assert (final["done"], final["generations"][0]["content"]) == (True, "Done.")
    key = CHAT_SIGNALS.outcome_key(request_id)
    assert received == [
        (
            CHAT_SIGNALS.channel(request_id),
            {"event": "generation", "id": request_id, "generation_id": job["id"], "outcome": key},
        ),
        (CHAT_SIGNALS.channel(request_id), {"event": "done", "id": request_id, "outcome": key}),
        (CHAT_SIGNALS.channel(cancelled_id), {"event": "cancelled", "id": cancelled_id}),
    ]
    assert all("Done." not in json.dumps(event) for _channel, event in received)
    assert chat_status(native_client, cancelled_id)["done"] is True


def test_best_effort_does_not_require_guarantees(native_client, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key, features=[])
    strict = chat_async(native_client, requester.api_key, chat_body())
    assert strict.status_code == 404
    assert strict.json()["rc"] == "no_worker_supports_features"
    relaxed = chat_body(horde={HORDE_CONFORMANCE: "best_effort"})
    assert chat_async(native_client, requester.api_key, relaxed).status_code == 202


def test_a_chat_pop_reads_its_request_in_its_pick(native_client, make_user, monkeypatch):
    # The pop's own statement returns what the chat job's payload reads of its request:
    # no session load of the row after the pick, so the pick runs in autocommit
    # and no failure after it can leave a job taken but never sent.
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)  # registered: the pop below is a known worker's
    request_id = submit_chat(native_client, requester.api_key)
    loads = []

    def no_request_load(self, entity, ident, **kwargs):
        loads.append(ident)
        raise OperationalError("SELECT", {}, Exception("the server closed the connection"))

    monkeypatch.setattr(Session, "get", no_request_load)
    job = chat_pop(native_client, worker.api_key)
    assert not loads, "the pop loaded an entity after its pick"
    assert job["id"] is not None
    assert job["is_chat"] is True
    assert job["payload"]["messages"] == chat_body()["messages"]
    assert chat_status(native_client, request_id)["processing"] == 1


def test_a_chat_pop_that_fails_leaves_the_job_queued(native_client, make_user, monkeypatch):
    # The database failing under the pop's statement (a restart) answers 503 and takes
    # nothing: the job is popped again at once, not left taken by a worker that never got
    # it until its ttl runs out.
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)  # registered: the pop below is a known worker's
    request_id = submit_chat(native_client, requester.api_key)
    real_cursor = jobs.raw_cursor
    failures = []

    @contextmanager
    def cursor_failing_once(session):
        if not failures:
            failures.append(session)
            raise OperationalError("SELECT", {}, Exception("the server closed the connection"))
        with real_cursor(session) as cursor:
            yield cursor

    monkeypatch.setattr(jobs, "raw_cursor", cursor_failing_once)
    body = chat_pop_body()
    failed = native_client.post("/generate/text/pop", headers={"apikey": worker.api_key}, json=body)
    assert failures, "the pop ran no statement: the failure was not injected"
    assert failed.status_code == 503, failed.text
    assert chat_status(native_client, request_id)["processing"] == 0
    again = chat_pop(native_client, worker.api_key)
    assert again["id"] is not None
    assert chat_status(native_client, request_id)["processing"] == 1


def test_a_chat_jobs_submit_is_refused_as_before(native_client, make_user):
    """The chat submit runs in the transaction that found the job's kind: every
    refusal keeps its error, the payload's checked before the key."""
    requester, worker, other = make_user("req", 1000), make_user("wk"), make_user("other")
    chat_pop(native_client, worker.api_key)
    request_id = submit_chat(native_client, requester.api_key)
    job = chat_pop(native_client, worker.api_key)

    def refused(api_key: str, **fields: Any) -> tuple[int, str]:
        response = submit_reply(native_client, api_key, job["id"], "Done.", **fields)
        return response.status_code, response.json()["rc"]

    assert refused("not-a-key", seed=2**70) == (400, "InvalidPayload")
    assert refused("not-a-key") == (401, "InvalidAPIKey")
    assert refused("0000000000") == (403, "AnonForbiddenWorker")
    assert refused(other.api_key) == (403, "WrongCredentials")
    assert submit_reply(native_client, worker.api_key, job["id"], "Done.").status_code == 200
    assert refused(worker.api_key) == (400, "DuplicateGen")
    assert chat_status(native_client, request_id)["finished"] == 1


def _stored_final_status(native_service, request_id: str) -> dict[str, Any]:
    redis = Redis.from_url(native_service.context.settings.redis_url)
    try:
        outcome = redis.get(CHAT_SIGNALS.outcome_key(request_id))
    finally:
        redis.close()
    assert outcome is not None
    return dict(json.loads(outcome))


def _call(call_id: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": "{}"},
    }


def test_a_submit_is_read_by_its_jobs_kind_whatever_its_body_looks_like(native_client, make_user):
    """A submit carrying a chat reply's fields is read as a chat job's first (one
    round trip); a text job's id sent so is answered as a text submit without a text, and a
    chat job's fault, which carries no reply, is read as a chat job's."""
    requester, worker = make_user("req", 1000), make_user("wk")
    submit_text(native_client, requester.api_key)
    text_job = pop(native_client, worker.api_key)["id"]
    answered = submit_reply(native_client, worker.api_key, text_job, "a chat reply")
    assert (answered.status_code, answered.json()["rc"]) == (400, "InvalidPayload")
    assert "generation" in answered.json()["message"]
    text_fault = submit_reply(native_client, worker.api_key, text_job, None, state="faulted")
    assert text_fault.status_code == 200, text_fault.text

    chat_pop(native_client, worker.api_key)
    request_id = submit_chat(native_client, requester.api_key)
    chat_job = chat_pop(native_client, worker.api_key)["id"]
    faulted = submit_reply(native_client, worker.api_key, chat_job, None, state="faulted")
    assert faulted.status_code == 200, faulted.text
    assert chat_status(native_client, request_id)["restarted"] == 1


@pytest.mark.parametrize(
    "reply",
    [
        {"content": "Done."},
        {"content": None, "tool_calls": [_call("c1")], "usage": {"completion_tokens": 7}},
        {
            "content": "withheld",
            "state": STATE_CENSORED,
            "seed": 42,
            "gen_metadata": [{"type": "x"}],
        },
    ],
    ids=["plain", "tool_calls", "censored"],
)
def test_the_stored_final_status_is_what_the_status_route_answers(
    native_client, native_service, make_user, reply
):
    """A request ended by its only job's reply: its final status is built from what the
    submit holds, and must equal the status route's read of the ended request."""
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key, features=EVERYTHING)
    body = chat_body(**{PARAM_TOOLS: [TOOL], PARAM_TOOL_CHOICE: "auto"})
    request_id = chat_async(native_client, requester.api_key, body).json()["id"]
    job = chat_pop(native_client, worker.api_key, features=EVERYTHING)
    content = reply.pop("content")
    submitted = submit_reply(native_client, worker.api_key, job["id"], content, **reply)
    assert submitted.status_code == 200, submitted.text
    stored = _stored_final_status(native_service, request_id)
    assert (stored["done"], stored["finished"]) == (True, 1)
    assert stored == chat_status(native_client, request_id)


def test_a_final_status_after_restarts_is_what_the_status_route_answers(
    native_client, native_service, make_user
):
    """A request with more than its landing job (a refused reply restarted it), and one
    that faulted past its fault limit: their final status is read, and equals the route's."""
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key, features=EVERYTHING)
    body = chat_body(**{PARAM_TOOLS: [TOOL], PARAM_TOOL_CHOICE: "required"})
    restarted = chat_async(native_client, requester.api_key, body).json()["id"]
    job = chat_pop(native_client, worker.api_key, features=EVERYTHING)
    assert submit_reply(native_client, worker.api_key, job["id"], "No call.").status_code == 400
    job = chat_pop(native_client, worker.api_key, features=EVERYTHING)
    landed = submit_reply(native_client, worker.api_key, job["id"], None, tool_calls=[_call("c")])
    assert landed.status_code == 200, landed.text
    stored = _stored_final_status(native_service, restarted)
    assert (stored["done"], stored["restarted"]) == (True, 1)
    assert stored == chat_status(native_client, restarted)
    faulted = submit_chat(native_client, requester.api_key)
    for _ in range(native_service.context.policy.fault_limit + 1):
        job = chat_pop(native_client, worker.api_key, features=EVERYTHING)
        fault = {"state": STATE_FAULTED, "gen_metadata": [{"type": "x", "value": STATE_FAULTED}]}
        assert (
            submit_reply(native_client, worker.api_key, job["id"], None, **fault).status_code == 200
        )
    stored = _stored_final_status(native_service, faulted)
    assert stored["faulted"]
    assert stored == chat_status(native_client, faulted)


def record_statements(monkeypatch: pytest.MonkeyPatch, sent: list[str]) -> None:
    """Append the first 40 characters of every statement the service sends (the sweeper's
    thread left out) to ``sent``, until ``monkeypatch.undo()``."""
    execute = psycopg.Cursor.execute

    def seen(cursor: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name != "horde-sweeper":
            text = query if isinstance(query, str) else bytes(query).decode()
            sent.append(" ".join(text.split())[:40])
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", seen)


def test_a_submit_answers_after_its_unflushed_commit_reached_the_disk(
    native_client, make_user, monkeypatch
):
    """The chat submit's COMMIT goes with its writes and does not wait for the disk; the
    submit flushes (``flush_wal``) before it reads the queue position its 202 carries."""
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)  # its worker online
    sent: list[str] = []
    record_statements(monkeypatch, sent)
    submit_chat(native_client, requester.api_key)
    monkeypatch.undo()
    commit = sent.index("COMMIT")
    flush = sent.index("SELECT pg_logical_emit_message(true, 'ho")
    position = next(i for i, q in enumerate(sent) if q.startswith("SELECT count(*)"))
    assert commit < flush < position, sent


def test_a_chat_submit_wakes_its_own_pops_at_its_commit_and_publishes_after_its_status(
    native_client, native_service, make_user, monkeypatch
):
    """The submit's own process's waiting pops are woken at its commit; the wake the other
    processes get through Redis is published once its 202's status is read, since this
    process reads the published wake too, and read while the woken pop runs it slows that
    pop (docs/performance.md)."""
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)  # its worker online
    redis = Redis.from_url(native_service.context.settings.redis_url)
    another_process = redis.pubsub()
    another_process.subscribe(WAKE_CHANNEL)
    confirmed = another_process.get_message(timeout=10.0)
    assert confirmed is not None
    assert confirmed["type"] == "subscribe"
    steps: list[str] = []

    def noted(name: str, call: Any) -> Any:
        def run(*args: Any) -> Any:
            steps.append(name)
            return call(*args)

        return run

    record_statements(monkeypatch, steps)
    monkeypatch.setattr(chat_views, "wake_local", noted("wake here", chat_views.wake_local))
    monkeypatch.setattr(chat_views, "publish_wake", noted("publish", chat_views.publish_wake))
    submit_chat(native_client, requester.api_key)
    monkeypatch.undo()
    message = another_process.get_message(timeout=10.0)
    another_process.close()
    redis.close()
    assert message is not None, "the other processes were not woken"
    assert json.loads(message["data"]) == [MODEL]
    commit, here = steps.index("COMMIT"), steps.index("wake here")
    position = next(i for i, q in enumerate(steps) if q.startswith("SELECT count(*)"))
    assert commit < here < position < steps.index("publish"), steps
    assert steps.count("publish") == 1, steps


def test_a_reply_that_ends_its_request_is_read_in_one_round_trip_and_paid_in_one(
    native_client, native_service, make_user, monkeypatch
):
    """A kept reply that ends its request: its key, job and the online pool its
    final status shows are read in one round trip (two statements in one pipeline), it is
    paid by one statement, and nothing else is sent to the database, which the request's
    final status is built without (its rows, and the pool, as the submit read them). Every
    statement the driver runs is seen, whichever path (ORM, Core, raw cursor) sent it."""
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    request_id = submit_chat(native_client, requester.api_key)
    job = chat_pop(native_client, worker.api_key)
    sent: list[tuple[str, bool]] = []
    execute = psycopg.Cursor.execute

    def seen(cursor: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name.startswith("horde-lane"):  # not the sweep's
            text = query if isinstance(query, str) else bytes(query).decode()
            pipelined = cursor.connection.pgconn.pipeline_status != pq.PipelineStatus.OFF
            sent.append((" ".join(text.split())[:40], pipelined))
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", seen)
    assert submit_reply(native_client, worker.api_key, job["id"], "Done.").status_code == 200
    monkeypatch.undo()
    assert sent == [
        ("SELECT owner.id, owner.trusted, job.* FR", True),
        ("SELECT workers.id, workers.name, workers", True),
        ("SELECT * FROM horde_pay( $1::uuid, $2::u", False),
    ]
    stored = _stored_final_status(native_service, request_id)
    assert stored["done"]
    assert stored["eligible_threads"] == 1
    assert stored == chat_status(native_client, request_id)


def test_a_submit_of_a_request_that_streams_no_deltas_leaves_the_leases_alone(
    native_client, make_user, monkeypatch
):
    """Only a request that streams deltas has a lease (written at its pop): any other's
    submit neither reads nor ends one (two Redis round trips that would find nothing). The
    lease calls are counted and run as ever."""
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    request_id = submit_chat(native_client, requester.api_key)
    job = chat_pop(native_client, worker.api_key)
    assert job["stream"] is False
    called: list[str] = []
    for name in ("read_lease", "finish", "mark_ended"):
        step = getattr(worker_views, name)
        monkeypatch.setattr(worker_views, name, _counted(called, name, step))
    assert submit_reply(native_client, worker.api_key, job["id"], "Done.").status_code == 200
    assert called == []
    assert chat_status(native_client, request_id)["done"]


def _counted(called: list[str], name: str, step: Any) -> Any:
    def counted(*args: Any) -> Any:
        called.append(name)
        return step(*args)

    return counted


def test_a_lease_that_cannot_be_ended_does_not_fail_the_landed_submit(
    native_client, native_service, make_user, monkeypatch
):
    """A streamed job's lease is ended after its submit's commit, best effort: a Redis error
    there is logged, and the submit still answers 200 and stores the final status its
    events name (it answered 503 after the commit, with no events)."""
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    request_id = submit_chat(native_client, requester.api_key, stream=True)
    job = chat_pop(native_client, worker.api_key)
    assert job["stream"] is True

    def lease_store_down(*_args: Any) -> None:
        raise RedisConnectionError("the lease's Redis is down")

    monkeypatch.setattr(worker_views, "finish", lease_store_down)
    assert submit_reply(native_client, worker.api_key, job["id"], "Done.").status_code == 200
    assert _stored_final_status(native_service, request_id)["done"]
    assert chat_status(native_client, request_id)["done"]
