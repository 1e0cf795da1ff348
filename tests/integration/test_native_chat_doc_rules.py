"""Design-doc rules on the live native API (issue 17): the developer role as stored, what
strict verification lets through as cut off, and where a request without max_tokens keeps
room for its reply (routing, truncation, the job)."""

from __future__ import annotations

import pytest

from generated.chat.names import (
    HORDE_CONTEXT_FIT,
    LIMIT_MAX_CONTEXT_LENGTH,
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
from runtime.contract.messages import estimated_tokens, text_chars
from runtime.native.db.tables import WaitingPrompt
from tests.integration.chat_flow import (
    MODEL,
    chat_async,
    chat_body,
    chat_pop,
    chat_status,
    submit_chat,
    submit_reply,
)

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
