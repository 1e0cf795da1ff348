"""End to end on the demo model (the openai SDK -> the front -> the native API -> the chat
worker -> llama-cpp-python), what real clients trip on:

* a streamed reply's usage chunk carries the worker's counts, the numbers the same request
  gets unstreamed (LangChain and LiteLLM cost tracking read it). llama-cpp-python sends no
  usage in a stream, so the worker counts with its exact counter: the prompt as its fit
  check counted it, the reply by tokenizing its text;
* ``GET /v1/models/{id}`` (the SDK's ``models.retrieve``), 404 model_not_found otherwise;
* ``x-request-id`` on every response (the SDK's ``_request_id``): the horde request id once
  submitted, a front id before;
* ``user`` and ``safety_identifier`` accepted and stored with the request;
* a feature gap names what is missing; required among several tools is served (the worker
  forces it by grammar on llama-cpp-python).
"""

from __future__ import annotations

import openai
import pytest
from openai import OpenAI
from sqlalchemy.orm import Session, sessionmaker

from runtime.native.db.tables import WaitingPrompt
from runtime.worker.tiny_model import DEMO_REPLY, MODEL_NAME
from tests.e2e.conftest import DemoStack
from tests.support.demo_model import DEMO_CONTEXT, UNIT_TOOL

pytestmark = pytest.mark.e2e

CONTEXT = DEMO_CONTEXT
QUESTION = [{"role": "user", "content": "Who are you? Answer in one sentence, please."}]


@pytest.fixture
def sdk(demo_stack: DemoStack) -> OpenAI:
    return demo_stack[0]


def test_streamed_usage_is_the_workers_counts_the_same_as_the_plain_reply(sdk: OpenAI) -> None:
    plain = sdk.chat.completions.create(model=MODEL_NAME, messages=QUESTION)  # type: ignore[arg-type]
    stream = sdk.chat.completions.create(
        model=MODEL_NAME,
        messages=QUESTION,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == DEMO_REPLY
    usage_chunks = [c for c in chunks if not c.choices]
    assert len(usage_chunks) == 1
    assert usage_chunks[0].usage is not None
    assert plain.usage is not None
    streamed, counted = usage_chunks[0].usage, plain.usage
    assert (streamed.prompt_tokens, streamed.completion_tokens, streamed.total_tokens) == (
        counted.prompt_tokens,
        counted.completion_tokens,
        counted.total_tokens,
    )
    extra = usage_chunks[0].model_extra or {}
    assert extra["x_horde"]["estimated_usage"] is False  # counted, not the front's estimate


def test_the_sdk_retrieves_a_served_model_and_gets_404_for_another(sdk: OpenAI) -> None:
    model = sdk.models.retrieve(MODEL_NAME)
    assert (model.id, model.object, model.owned_by) == (MODEL_NAME, "model", "horde")
    with pytest.raises(openai.NotFoundError) as info:
        sdk.models.retrieve("no-such-model")
    assert info.value.code == "model_not_found"
    assert "no-such-model" in info.value.message
    assert info.value.request_id is not None


def test_every_front_response_names_its_request_in_x_request_id(sdk: OpenAI) -> None:
    completion = sdk.chat.completions.create(model=MODEL_NAME, messages=QUESTION)  # type: ignore[arg-type]
    horde_id = (completion.model_extra or {})["x_horde"]["request_id"]
    assert completion._request_id == horde_id  # submitted: the horde request id
    stream = sdk.chat.completions.create(model=MODEL_NAME, messages=QUESTION, stream=True)  # type: ignore[arg-type]
    chunks = list(stream)
    assert stream.response.headers["x-request-id"] == chunks[0].id.removeprefix("chatcmpl-")
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.chat.completions.create(model=MODEL_NAME, messages=QUESTION, n=2)  # type: ignore[arg-type]
    assert (refused.value.request_id or "").startswith("front-")  # refused before submission
    listed = sdk.models.with_raw_response.list()
    assert listed.headers["x-request-id"].startswith("front-")


def test_user_and_safety_identifier_are_accepted_and_stored_with_the_request(
    sdk: OpenAI, native_db: sessionmaker[Session]
) -> None:
    completion = sdk.chat.completions.create(
        model=MODEL_NAME,
        messages=QUESTION,  # type: ignore[arg-type]
        user="app-user-7",
        safety_identifier="hashed-end-user",
    )
    assert completion.choices[0].message.content == DEMO_REPLY
    request_id = (completion.model_extra or {})["x_horde"]["request_id"]
    with native_db() as session:
        stored = session.get(WaitingPrompt, request_id)
        assert stored is not None
        assert stored.chat_request is not None
        kept = {k: stored.chat_request.get(k) for k in ("user", "safety_identifier")}
    assert kept == {"user": "app-user-7", "safety_identifier": "hashed-end-user"}


def test_a_feature_gap_names_what_is_missing(sdk: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        sdk.chat.completions.create(
            model=MODEL_NAME,
            messages=QUESTION,  # type: ignore[arg-type]
            reasoning_effort="low",  # the demo model does not reason
        )
    assert info.value.code == "no_worker_supports_features"
    assert "reasoning" in info.value.message
    assert "best_effort" not in info.value.message  # a feature, not a guarantee


def test_required_among_several_tools_is_served_under_strict(sdk: OpenAI) -> None:
    """What LangChain's tool_choice "any" and a pydantic-ai agent with tools and an output
    type send: llama-cpp-python ignores it, the worker forces it by grammar (and declares
    tool_choice_required_enforced), so it is not 404 no_worker_supports_features."""
    second = {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
    }
    reply = sdk.chat.completions.create(
        model=MODEL_NAME,
        messages=QUESTION,  # type: ignore[arg-type]
        tools=[UNIT_TOOL, second],  # type: ignore[list-item]
        tool_choice="required",
    )
    assert reply.choices[0].finish_reason == "tool_calls"
    (call,) = reply.choices[0].message.tool_calls or []
    assert call.function.name in ("get_weather", "get_time")  # type: ignore[union-attr]
