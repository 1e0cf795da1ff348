"""End to end: the official openai SDK -> the front -> the native API -> the chat worker ->
llama.cpp serving the demo model. What ``make run`` serves, on free ports and temp folders.

Asserted: the demo model's one reply, the backend's token counts, and what a grammar forces
(a structured call to the named function with schema-valid arguments).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from runtime.worker.config import DEFAULT_MAX_LENGTH
from runtime.worker.tiny_model import DEMO_REPLY, MODEL_NAME
from tests.e2e.conftest import DemoStack
from tests.support.demo_model import DEMO_CONTEXT, UNIT_TOOL

pytestmark = pytest.mark.e2e

CONTEXT = DEMO_CONTEXT
QUESTION = [{"role": "user", "content": "Who are you?"}]


def test_the_sdk_gets_the_demo_reply_with_the_backends_usage(demo_stack: DemoStack) -> None:
    sdk, worker = demo_stack
    completion = sdk.chat.completions.create(model=MODEL_NAME, messages=QUESTION)  # type: ignore[arg-type]
    choice = completion.choices[0]
    assert (choice.message.content, choice.finish_reason) == (DEMO_REPLY, "stop")
    assert completion.model == MODEL_NAME
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == worker.probed.counter.count(QUESTION, None)


def test_a_streamed_call_ends_with_the_whole_demo_reply(demo_stack: DemoStack) -> None:
    sdk, _ = demo_stack
    stream = sdk.chat.completions.create(model=MODEL_NAME, messages=QUESTION, stream=True)  # type: ignore[arg-type]
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == DEMO_REPLY
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["stop"]


def test_a_named_tool_choice_comes_back_as_that_call(demo_stack: DemoStack) -> None:
    sdk, _ = demo_stack
    completion = sdk.chat.completions.create(
        model=MODEL_NAME,
        messages=QUESTION,  # type: ignore[arg-type]
        tools=[UNIT_TOOL],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=300,
        # best_effort: the grammar forces the call in either mode (the strict case is
        # test_a_tool_loops_second_turn_is_answered_not_faulted's first turn).
        extra_body={"horde": {"conformance": "best_effort"}},
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    assert len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments)["unit"] in ("celsius", "fahrenheit")  # type: ignore[union-attr]


class Reading(BaseModel):
    city: str
    degrees: int
    sunny: bool


def test_sdk_parse_with_a_pydantic_model_returns_the_parsed_object(demo_stack: DemoStack) -> None:
    # A strict json_schema needs json_schema, json_output_enforced and json_schema_enforced:
    # the demo worker declares them because its grammar-constrained output closes at once.
    sdk, _ = demo_stack
    completion = sdk.chat.completions.parse(
        model=MODEL_NAME,
        messages=QUESTION,  # type: ignore[arg-type]
        response_format=Reading,
        max_tokens=300,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(choice.message.parsed, Reading)
    assert Reading.model_validate_json(choice.message.content or "") == choice.message.parsed


def test_a_tool_loops_second_turn_is_answered_not_faulted(demo_stack: DemoStack) -> None:
    sdk, _ = demo_stack
    messages: list[Any] = list(QUESTION)
    first = sdk.chat.completions.create(
        model=MODEL_NAME,
        messages=messages,
        tools=[UNIT_TOOL],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=300,
    )
    asked = first.choices[0].message
    assert asked.content is None
    assert asked.tool_calls is not None
    # Sent back as the SDK sends it: content None beside tool_calls, then the tool's result.
    messages += [asked, {"role": "tool", "tool_call_id": asked.tool_calls[0].id, "content": "20"}]
    second = sdk.chat.completions.create(model=MODEL_NAME, messages=messages, tools=[UNIT_TOOL])  # type: ignore[list-item]
    choice = second.choices[0]
    assert (choice.message.content, choice.finish_reason) == (DEMO_REPLY, "stop")


def test_a_long_conversation_without_max_tokens_gets_as_much_as_fits_not_a_fault(
    demo_stack: DemoStack,
) -> None:
    """An absent max_tokens means as much as fits. The conversation fits the demo
    worker's context with room for a reply, but not with its whole declared max_length,
    which the worker used to add in its fit check: three prompt_overflow faults, then 502."""
    sdk, worker = demo_stack
    turn = "Tell me once more who you are, and say it plainly. "
    messages: list[Any] = list(QUESTION)
    while CONTEXT - worker.probed.counter.count(messages, None) >= DEFAULT_MAX_LENGTH:
        messages = [
            {"role": "user", "content": turn},
            {"role": "assistant", "content": turn},
            *messages,
        ]
    counted = worker.probed.counter.count(messages, None)
    assert 64 <= CONTEXT - counted < DEFAULT_MAX_LENGTH  # fits, not with the declared length
    completion = sdk.chat.completions.create(model=MODEL_NAME, messages=messages)
    choice = completion.choices[0]
    assert (choice.message.content, choice.finish_reason) == (DEMO_REPLY, "stop")
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == counted
