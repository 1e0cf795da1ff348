"""user and safety_identifier: accepted, stored with the request, never sent to
the worker, and shown on the native chat status only to a read with the apikey of the
registered user who submitted the request (the horde has no moderator role): not to a read
without a key (the front's, anyone's holding the id) nor to another user's key."""

from __future__ import annotations

import pytest

from tests.integration.chat_flow import chat_pop, submit_chat

pytestmark = pytest.mark.integration

END_USER = {"user": "app-user-7", "safety_identifier": "hashed-end-user"}


def test_end_user_ids_are_stored_and_shown_only_to_the_requests_owner(native_client, make_user):
    requester, other, worker = make_user("req", kudos=1000), make_user("other"), make_user("wk")
    chat_pop(native_client, worker.api_key)
    request_id = submit_chat(native_client, requester.api_key, **END_USER)
    path = f"/generate/chat/status/{request_id}"

    owners = native_client.get(path, headers={"apikey": requester.api_key})
    assert owners.status_code == 200
    assert owners.json()["end_user"] == END_USER
    assert "end_user" not in native_client.get(path).json()
    assert "end_user" not in native_client.get(path, headers={"apikey": other.api_key}).json()
    assert "end_user" not in native_client.get(path, headers={"apikey": "not-a-key"}).json()

    job = chat_pop(native_client, worker.api_key)
    assert job["id"]
    assert not set(END_USER) & set(job["payload"])  # the worker never sees them
