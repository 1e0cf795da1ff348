"""Design-doc rules on the live native API (issue 17): the developer role as stored, a
refusal's param in the native error body, and what strict verification lets through as
cut off."""

from __future__ import annotations

import pytest

from generated.chat.names import ROLE_DEVELOPER, ROLE_SYSTEM
from runtime.native.db.tables import WaitingPrompt
from tests.integration.chat_flow import MODEL, chat_async, chat_pop

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
