"""A text request's style (upstream's TextAsyncGenerate.apply_style): this horde holds no
styles, so it is refused as upstream refuses a style it does not hold, never dropped."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from runtime.native.db.tables import WaitingPrompt

pytestmark = pytest.mark.integration

TEXT = "/generate/text/async"


@pytest.mark.raised_limits("text_async", why="three refusals in a row from one address")
def test_a_style_is_refused_before_the_key_and_never_dropped(native_client, native_db, make_user):
    alice = make_user("alice", 100)
    for key in (alice.api_key, "not-a-key"):
        body = {"prompt": "Once upon a time", "style": "my-style"}
        refused = native_client.post(TEXT, headers={"apikey": key}, json=body)
        assert refused.status_code == 404
        assert refused.json() == {
            "message": "Style with ID 'my-style' not found: this horde serves no styles.",
            "rc": "StyleNotFound",
            "param": "style",
        }
    short = native_client.post(
        TEXT, headers={"apikey": alice.api_key}, json={"prompt": "x", "style": "ab"}
    )
    assert (short.status_code, short.json()["rc"]) == (400, "InvalidPayload")
    with native_db() as session:
        assert session.scalar(select(func.count()).select_from(WaitingPrompt)) == 0
