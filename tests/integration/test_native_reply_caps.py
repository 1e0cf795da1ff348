"""A worker's reply is capped by the spec (SubmitInput in spec/api/native.yaml): content,
reasoning, a text generation, tool calls and gen_metadata over a cap are refused 400 at
submit, nothing is stored, and the job can still be answered within the caps."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.tables.route_schemas import DEFS
from tests.integration.chat_flow import chat_pop, chat_status, submit_chat, submit_reply
from tests.integration.native_flow import ledger, pop, status, submit, submit_text

pytestmark = pytest.mark.integration

SUBMIT = DEFS["native"]["SubmitInput"]["properties"]
TOOL_CALL = DEFS["native"]["SubmitToolCall"]["allOf"][1]["properties"]
METADATA = DEFS["native"]["GenMetadataEntry"]
CONTENT_CAP = SUBMIT["content"]["maxLength"]
REASONING_CAP = SUBMIT["reasoning_content"]["maxLength"]
GENERATION_CAP = SUBMIT["generation"]["maxLength"]
TOOL_CALLS_CAP = SUBMIT["tool_calls"]["maxItems"]
ARGUMENTS_CAP = TOOL_CALL["function"]["properties"]["arguments"]["maxLength"]
METADATA_ITEMS_CAP = SUBMIT["gen_metadata"]["maxItems"]
METADATA_VALUE_CAP = METADATA["additionalProperties"]["maxLength"]


def _call(i: int, arguments: str = "{}") -> dict[str, Any]:
    function = {"name": "f", "arguments": arguments}
    return {"id": f"call_{i}", "type": "function", "function": function}


OVER_CAP = [
    ("content", {"content": "a" * (CONTENT_CAP + 1)}),
    ("reasoning", {"reasoning_content": "r" * (REASONING_CAP + 1)}),
    ("tool call count", {"tool_calls": [_call(i) for i in range(TOOL_CALLS_CAP + 1)]}),
    ("tool call arguments", {"tool_calls": [_call(0, '"' + "x" * ARGUMENTS_CAP + '"')]}),
    ("metadata count", {"gen_metadata": [{"type": "info"}] * (METADATA_ITEMS_CAP + 1)}),
    ("metadata value", {"gen_metadata": [{"type": "info", "ref": "m" * (METADATA_VALUE_CAP + 1)}]}),
    ("metadata fields", {"gen_metadata": [{f"k{i}": "v" for i in range(40)}]}),
    ("metadata nesting", {"gen_metadata": [{"type": {"nested": ["a" * 100]}}]}),
]


def test_the_caps_are_a_few_mib_at_most():
    total = CONTENT_CAP + REASONING_CAP + TOOL_CALLS_CAP * ARGUMENTS_CAP
    assert total <= 8 * 2**20
    assert METADATA_ITEMS_CAP * METADATA["maxProperties"] * METADATA_VALUE_CAP <= 2**20


@pytest.mark.parametrize(("label", "fields"), OVER_CAP, ids=[label for label, _ in OVER_CAP])
def test_a_chat_reply_over_a_cap_is_refused_and_nothing_is_stored(
    native_client, native_db, make_user, label, fields
):
    requester, owner = make_user("requester", kudos=1000), make_user("owner")
    assert chat_pop(native_client, owner.api_key)["id"] is None  # online first
    request_id = submit_chat(native_client, requester.api_key)
    job = chat_pop(native_client, owner.api_key)
    assert job["id"]
    body = {"content": "Hello!", **fields}
    refused = submit_reply(native_client, owner.api_key, job["id"], **body)
    assert refused.status_code == 400, (label, refused.status_code, refused.text[:300])
    assert refused.json()["rc"] == "InvalidPayload"
    assert len(refused.content) < 2000  # the refusal names the field, it does not echo it
    state = chat_status(native_client, request_id)
    assert not state["done"]
    assert state["generations"] == []
    assert ledger(native_db, owner.id) == []
    answered = submit_reply(native_client, owner.api_key, job["id"], "Hello!")
    assert answered.status_code == 200, answered.text
    assert chat_status(native_client, request_id)["generations"][0]["content"] == "Hello!"


def test_a_text_generation_over_the_cap_is_refused(native_client, native_db, make_user):
    requester, owner = make_user("requester", kudos=1000), make_user("owner")
    request_id = submit_text(native_client, requester.api_key)
    job = pop(native_client, owner.api_key)
    refused = submit(native_client, owner.api_key, job["id"], "g" * (GENERATION_CAP + 1))
    assert refused.status_code == 400, refused.text[:300]
    assert refused.json()["rc"] == "InvalidPayload"
    assert status(native_client, request_id)["generations"] == []
    assert ledger(native_db, owner.id) == []
    assert submit(native_client, owner.api_key, job["id"]).status_code == 200


def test_a_reply_at_the_caps_is_taken(native_client, make_user):
    requester, owner = make_user("requester", kudos=1000), make_user("owner")
    assert chat_pop(native_client, owner.api_key)["id"] is None  # online first
    request_id = submit_chat(native_client, requester.api_key)
    job = chat_pop(native_client, owner.api_key)
    metadata = [{"type": "info", "ref": "m" * METADATA_VALUE_CAP}] * METADATA_ITEMS_CAP
    taken = submit_reply(
        native_client, owner.api_key, job["id"], "a" * CONTENT_CAP, gen_metadata=metadata
    )
    assert taken.status_code == 200, taken.text[:300]
    generation = chat_status(native_client, request_id)["generations"][0]
    assert len(generation["content"]) == CONTENT_CAP
    assert len(generation["gen_metadata"]) == METADATA_ITEMS_CAP
