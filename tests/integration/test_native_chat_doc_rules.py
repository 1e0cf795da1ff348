"""Design-doc rules on the live native API: the developer role as stored, what
strict verification lets through as cut off, and where a request without max_tokens keeps
room for its reply (routing, truncation, the job)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from generated.chat.names import (
    CONFORMANCE_BEST_EFFORT,
    FEATURE_TOOLS,
    HORDE_CONFORMANCE,
    HORDE_CONTEXT_FIT,
    LIMIT_MAX_CONTEXT_LENGTH,
    LIMIT_MAX_TOOLS,
    PARAM_MAX_TOKENS,
    ROLE_DEVELOPER,
    ROLE_SYSTEM,
)
from generated.chat.tables import (
    FEATURES,
    GUARANTEES,
    PAYLOAD_FIT_MAX_TOKENS,
    REPLY_RESERVE_TOKENS,
)
from generated.wire import ANONYMOUS_API_KEY
from runtime.contract.messages import estimated_tokens, text_chars
from runtime.native.db.tables import Generation, WaitingPrompt, Worker
from runtime.stores.database import transaction
from tests.integration.chat_flow import (
    BASIC,
    MODEL,
    chat_async,
    chat_body,
    chat_pop,
    chat_status,
    submit_chat,
    submit_reply,
)
from tests.integration.planned import plan_nodes, plans, recorded

pytestmark = pytest.mark.integration


def test_a_developer_message_is_stored_and_sent_as_system(native_client, native_db, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    messages = [
        {"role": ROLE_DEVELOPER, "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    answer = chat_async(native_client, requester.api_key, {"model": MODEL, "messages": messages})
    assert answer.status_code == 202, answer.text
    with native_db() as session:
        wp = session.get(WaitingPrompt, answer.json()["id"])
        assert wp is not None
        assert [m["role"] for m in wp.messages] == [ROLE_SYSTEM, "user"]
        assert wp.prompt.startswith("system: Be brief.")
        # the full submission, as sent, stays in submitted_prompt
        assert wp.submitted_prompt.startswith("developer: Be brief.")
    payload = chat_pop(native_client, worker.api_key)["payload"]
    assert [m["role"] for m in payload["messages"]] == [ROLE_SYSTEM, "user"]


def test_a_reply_claiming_a_cut_it_does_not_show_is_held_to_strict_json(native_client, make_user):
    """finish_reason length on a short non-JSON reply to max_tokens 1000 is refused under
    strict (the job faults); a reply whose output estimate reached max_tokens passes."""
    requester, worker = make_user("req", 1000), make_user("wk")
    everything = [*FEATURES, *GUARANTEES]
    chat_pop(native_client, worker.api_key, features=everything)
    fmt = {"type": "json_object"}
    request_id = submit_chat(native_client, requester.api_key, max_tokens=1000, response_format=fmt)
    job = chat_pop(native_client, worker.api_key, features=everything)
    claimed = submit_reply(
        native_client, worker.api_key, job["id"], "Sure! Here is", finish_reason="length"
    )
    assert claimed.status_code == 400, claimed.text
    assert claimed.json()["rc"] == "ChatReplyRejected"
    assert "content_not_json" in claimed.json()["message"]
    job = chat_pop(native_client, worker.api_key, features=everything)
    assert job["id"]  # back in the queue after the fault
    cut = '{"story": "' + "once upon a time " * 250  # 4261 characters: 1066 tokens estimated
    shown = submit_reply(native_client, worker.api_key, job["id"], cut, finish_reason="length")
    assert shown.status_code == 200, shown.text
    generation = chat_status(native_client, request_id)["generations"][-1]
    assert generation["finish_reason"] == "length"
    assert generation["content"] == cut


@pytest.mark.raised_limits(
    "chat_async",
    why="three submits in a row from one address and key; routing and the reserve are under test",
)
def test_without_max_tokens_routing_truncation_and_the_job_reserve_room_for_a_reply(
    native_client, make_user
):
    """An absent max_tokens means as much as fits: the context measure reserves
    REPLY_RESERVE_TOKENS, truncate_oldest leaves that room, and the job's max_tokens is the
    room the worker's declared context leaves (flagged for the worker to fit)."""
    requester, worker = make_user("req", 1000), make_user("wk")
    limits = {LIMIT_MAX_CONTEXT_LENGTH: 200}
    chat_pop(native_client, worker.api_key, limits=limits)
    # 187 estimated tokens fit the 200-token context, but leave no room for a reply
    crowded = chat_async(native_client, requester.api_key, chat_body("x" * 560))
    assert crowded.status_code == 400, crowded.text
    assert crowded.json()["rc"] == "no_worker_supports_limit"
    assert crowded.json()["param"] == LIMIT_MAX_CONTEXT_LENGTH
    old = "an old turn " * 40  # 480 characters: 160 tokens, the whole history 172
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": old},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "The latest question?"},
    ]
    body = {"model": MODEL, "messages": messages, "horde": {HORDE_CONTEXT_FIT: "truncate_oldest"}}
    assert chat_async(native_client, requester.api_key, body).status_code == 202
    payload = chat_pop(native_client, worker.api_key, limits=limits)["payload"]
    assert [m["content"] for m in payload["messages"]] == ["You are terse.", "The latest question?"]
    prompt = estimated_tokens(text_chars(payload["messages"]))
    assert payload[PARAM_MAX_TOKENS] == 200 - prompt >= REPLY_RESERVE_TOKENS
    assert payload[PAYLOAD_FIT_MAX_TOKENS] is True
    # an explicit max_tokens keeps its meaning: no flag, the worker must fit it whole
    chat_async(native_client, requester.api_key, chat_body(max_tokens=30))
    explicit = chat_pop(native_client, worker.api_key, limits=limits)["payload"]
    assert explicit[PARAM_MAX_TOKENS] == 30
    assert PAYLOAD_FIT_MAX_TOKENS not in explicit


def test_eligibility_reads_no_candidates_messages(native_client, native_service, make_user):
    """Eligibility compares a declaration with the stored requirements and does not load a
    candidate's messages (design doc: "Capability declaration and routing by features").
    Every statement the native API runs for a status read and for pops (one finding only a
    request it may not take, one taking the other) is planned as it ran (EXPLAIN VERBOSE of
    its text and values): no scan of waiting_prompts outputs or filters on a request's
    messages or its whole stored request; only the UPDATE of the one request a pop took
    returns them, for the job."""
    requester, worker, toolsmith = make_user("req", 1000), make_user("wk"), make_user("tools")
    chat_pop(native_client, worker.api_key)
    chat_pop(native_client, toolsmith.api_key, "tool-worker", features=[*BASIC, FEATURE_TOOLS])
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    submit_chat(native_client, requester.api_key, tools=[tool])  # only tool-worker's
    plain = submit_chat(native_client, requester.api_key)
    with recorded("waiting_prompts") as ran:
        chat_status(native_client, plain)
        assert chat_pop(native_client, worker.api_key)["id"]  # passes the tool request over
    assert len(ran) >= 3
    scans, returned = [], []
    for plan in plans(native_service.context.engine, ran, "VERBOSE, FORMAT JSON"):
        for node in plan_nodes(plan):
            if node.get("Relation Name") != "waiting_prompts":
                continue
            reads = _reads_messages(node)
            (returned if node["Node Type"] == "ModifyTable" else scans).append(reads)
    assert scans
    assert not any(scans)
    assert returned == [True]  # the pop's UPDATE of the request it took


def _reads_messages(node: dict[str, Any]) -> bool:
    """Whether a plan node outputs or filters on the messages or the whole stored request
    (a key of it, such as the end user's identifiers, is not the messages)."""
    shown = " ".join([*node.get("Output", []), str(node.get("Filter", ""))])
    return bool(re.search(r"\.(messages|chat_request)\b(?!\[)", shown))


def test_limits_apply_under_best_effort(native_client, make_user):
    """best_effort relaxes the guarantees only: a limit still routes and refuses (design
    doc: "Guarantees and the conformance mode": a clamped value changes the request)."""
    requester = make_user("req", 1000)
    narrow, wide = make_user("narrow"), make_user("wide")
    features = [*BASIC, FEATURE_TOOLS]
    chat_pop(
        native_client, narrow.api_key, "narrow", features=features, limits={LIMIT_MAX_TOOLS: 1}
    )
    tools = [
        {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
        for name in ("first", "second")
    ]
    relaxed = {HORDE_CONFORMANCE: CONFORMANCE_BEST_EFFORT}
    refused = chat_async(native_client, requester.api_key, chat_body(tools=tools, horde=relaxed))
    assert refused.status_code == 400, refused.text
    assert (refused.json()["rc"], refused.json()["param"]) == (
        "no_worker_supports_limit",
        LIMIT_MAX_TOOLS,
    )
    chat_pop(native_client, wide.api_key, "wide", features=features, limits={LIMIT_MAX_TOOLS: 4})
    submit_chat(native_client, requester.api_key, tools=tools, horde=relaxed)
    passed_over = chat_pop(
        native_client, narrow.api_key, "narrow", features=features, limits={LIMIT_MAX_TOOLS: 1}
    )
    assert passed_over["id"] is None
    taken = chat_pop(
        native_client, wide.api_key, "wide", features=features, limits={LIMIT_MAX_TOOLS: 4}
    )
    assert taken["id"]


def test_a_chat_jobs_speed_sample_is_its_output_estimate_over_its_time(
    native_client, native_db, make_user
):
    """The output estimate is the speed sample too (design doc: "Reasoning"): content,
    reasoning and tool calls by characters over 4, capped at max_length, over the job's
    time; never the worker's reported counts."""
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    submit_chat(native_client, requester.api_key, max_tokens=500)
    job = chat_pop(native_client, worker.api_key)
    with transaction(native_db) as session:  # the worker took 50 s
        session.execute(
            update(Generation)
            .where(Generation.id == job["id"])
            .values(start_time=Generation.start_time - timedelta(seconds=50))
        )
    reply = {"reasoning_content": "r" * 200, "usage": {"completion_tokens": 9000}}
    landed = submit_reply(native_client, worker.api_key, job["id"], "x" * 200, **reply)
    assert landed.status_code == 200, landed.text
    with native_db() as session:
        speed = session.scalars(select(Worker.speed).where(Worker.name == "chat-worker")).one()
    assert speed == pytest.approx((200 + 200) / 4 / 50, abs=0.05)  # 100 tokens in ~50 s


def test_an_anonymous_request_waits_behind_every_users(native_client, make_user):
    """Anonymous requests have the lowest kudos priority (design doc: "Anonymous access"):
    one queued first still waits behind a later request of a user without kudos."""
    nobody, worker = make_user("no-kudos", 0), make_user("wk")
    chat_pop(native_client, worker.api_key)
    anonymous = submit_chat(native_client, ANONYMOUS_API_KEY, max_tokens=50)
    users = submit_chat(native_client, nobody.api_key, max_tokens=50)
    assert chat_status(native_client, users)["queue_position"] == 0
    assert chat_status(native_client, anonymous)["queue_position"] == 1
    assert chat_pop(native_client, worker.api_key)["id"]
    assert chat_status(native_client, users)["processing"] == 1
    assert chat_status(native_client, anonymous)["processing"] == 0
