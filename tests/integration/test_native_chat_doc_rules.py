"""Design-doc rules on the live native API (issue 17): the developer role as stored, a
refusal's param in the native error body, and what strict verification lets through as
cut off."""

from __future__ import annotations

import pytest

from generated.chat.names import ROLE_DEVELOPER, ROLE_SYSTEM
from generated.chat.tables import FEATURES, GUARANTEES
from runtime.native.db.tables import WaitingPrompt
from tests.integration.chat_flow import (
    MODEL,
    chat_async,
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
