"""The Responses API's translation in and out, without servers: a Responses body becomes the
chat request a chat completion makes (refusals naming the field as the client wrote it), and
a chat reply becomes OpenAI's Response object and stream events (checked against OpenAI's
schema)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from generated.errors import HordeError, StreamDiverged
from runtime.front.responses_api.events import ResponseEvents
from runtime.front.responses_api.reply import finished
from runtime.front.responses_api.request import checked_and_encoded
from runtime.front.sse import Delta, Final, ReplyEvents
from tests.support.openai_schema import assert_response, assert_response_event
from tests.support.replies import reply

TOOL = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": False,
    "defer_loading": False,  # an unknown key of a tool: dropped
}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}


def admitted(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    forward, request, echo = checked_and_encoded(json.dumps({"model": "m", **body}).encode())
    return json.loads(forward), request, echo


def refusal(body: dict[str, Any]) -> HordeError:
    with pytest.raises(HordeError) as info:
        admitted(body)
    return info.value


def test_instructions_and_items_become_the_chat_conversation() -> None:
    items: list[Any] = [
        {"role": "user", "content": "Weather?"},  # no type: an easy input message
        {"type": "reasoning", "id": "rs_1", "summary": []},  # dropped
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Looking.", "annotations": []}],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": "{}",
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "And this?"},
                {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"},
            ],
        },
    ]
    forward, _, _ = admitted({"instructions": "Be brief.", "input": items, "tools": [TOOL]})
    assert forward["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Looking."}],
            "tool_calls": [CALL],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "And this?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "https://example.com/a.png", "detail": "low"},
                },
            ],
        },
    ]
    assert forward["tools"] == [
        {"type": "function", "function": {k: TOOL[k] for k in ("name", "parameters", "strict")}}
    ]


def test_keys_become_their_chat_parameters() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    forward, request, _ = admitted(
        {
            "input": "Hi",
            "max_output_tokens": 100,
            "temperature": 0.2,
            "top_p": 1,  # at its default: omitted
            "reasoning": {"effort": "high", "context": "current_turn"},
            "text": {
                "format": {"type": "json_schema", "name": "A", "schema": schema, "strict": True},
                "verbosity": "medium",
            },
            "tools": [TOOL],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": False,
            "stream": True,
            "stream_options": {"include_obfuscation": False},
            "truncation": "auto",
            "store": False,
            "include": [],
            "metadata": {},
            "max_tool_calls": 3,
            "safety_identifier": "u1",
            "horde": {"conformance": "best_effort"},
        }
    )
    assert {k: v for k, v in forward.items() if k not in ("messages", "tools")} == {
        "model": "m",
        "max_completion_tokens": 100,
        "temperature": 0.2,
        "reasoning_effort": "high",
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "A", "schema": schema, "strict": True},
        },
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False,
        "stream": True,
        "stream_options": {"include_obfuscation": False},
        "safety_identifier": "u1",
        "horde": {"conformance": "best_effort", "context_fit": "truncate_oldest"},
    }
    assert request["horde"]["context_fit"] == "truncate_oldest"


def test_an_empty_tools_list_is_no_tools() -> None:
    """The agents SDK sends tools [] on every request of an agent without tools."""
    forward, _, echo = admitted({"input": "Hi", "tools": []})
    assert "tools" not in forward
    assert echo["tools"] == []


def test_the_echo_repeats_the_request_or_openais_values() -> None:
    _, _, echo = admitted(
        {
            "input": "Hi",
            "tools": [TOOL],
            "text": {"verbosity": "medium"},
            "reasoning": {"effort": "low"},
        }
    )
    assert echo["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": None,
            "parameters": TOOL["parameters"],
            "strict": False,
        }
    ]
    assert echo["text"] == {"format": {"type": "text"}, "verbosity": "medium"}
    assert echo["reasoning"] == {"effort": "low", "summary": None}
    assert (echo["temperature"], echo["top_p"], echo["tool_choice"]) == (1, 1, "auto")
    assert (echo["metadata"], echo["instructions"], echo["truncation"]) == ({}, None, "disabled")


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"previous_response_id": "resp_1"}, "UnsupportedChatParameter", "previous_response_id"),
        ({"store": True}, "UnsupportedChatParameter", "store"),
        ({"conversation": {"id": "conv_1"}}, "UnsupportedChatParameter", "conversation"),
        ({"background": True}, "UnsupportedChatParameter", "background"),
        ({"prompt": {"id": "pmpt_1"}}, "UnsupportedChatParameter", "prompt"),
        ({"include": ["reasoning.encrypted_content"]}, "UnsupportedChatParameter", "include"),
        ({"text": {"verbosity": "low"}}, "UnsupportedChatParameter", "text.verbosity"),
        ({"text": {"colour": "red"}}, "UnsupportedChatParameter", "text.colour"),
        ({"reasoning": {"context": "all_turns"}}, "UnsupportedChatParameter", "reasoning.context"),
        (
            {"text": {"format": {"type": "json_object", "strict": True}}},
            "UnsupportedChatParameter",
            "text.format.strict",
        ),
        (
            {"text": {"format": {"type": "json_schema", "name": "A"}}},
            "InvalidChatParameter",
            "text.format",
        ),  # the message names text.format.schema, as check() does
        ({"tools": [{"type": "file_search"}]}, "UnsupportedChatParameter", "tools.[0].type"),
        ({"tools": [{"type": "function"}]}, "InvalidChatParameter", "tools.[0]"),
        (
            {
                "tools": [TOOL],
                "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []},
            },
            "UnsupportedChatParameter",
            "tool_choice.type",
        ),
        (
            {"input": [{"type": "item_reference", "id": "msg_1"}]},
            "UnsupportedChatParameter",
            "input.[0].type",
        ),
        ({"input": [{"type": "telepathy"}]}, "InvalidChatParameter", "input.[0].type"),
        ({"input": [{"content": "no role"}]}, "InvalidChatParameter", "input.[0].type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "UnsupportedChatParameter",
            "input.[0].content.[0].file_id",
        ),
        (
            {"input": "Hi", "truncation": "auto", "horde": {"context_fit": "refuse"}},
            "InvalidChatParameter",
            "truncation",
        ),
        ({"max_output_tokens": 15}, "InvalidChatParameter", "max_output_tokens"),
        ({}, "InvalidChatParameter", "input"),
    ],
)
def test_refusals_name_the_key(body: dict[str, Any], code: str, param: str) -> None:
    error = refusal({"input": "Hi", **body} if "input" not in body and body else body)
    assert (error.code, error.param) == (code, param), error.message


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        # the chat contract's refusals, named by the item or key they came from
        (
            {
                "input": [
                    {
                        "role": "system",
                        "content": [{"type": "input_image", "image_url": "https://e.com/a.png"}],
                    }
                ]
            },
            "InvalidChatParameter",
            "input.[0].content.[0].type",
        ),
        (
            {
                "instructions": "Hi",
                "input": [
                    {"role": "user", "content": ""},
                    {"type": "function_call_output", "call_id": "x", "output": "1"},
                ],
                "tools": [TOOL],
            },
            "OrphanToolMessage",
            "input.[1]",
        ),
        (
            {
                "input": [
                    {
                        "type": "function_call",
                        "call_id": "c",
                        "name": "get_weather",
                        "arguments": "{}",
                    }
                ],
                "tools": [TOOL],
            },
            "UnansweredToolCalls",
            "input.[0]",
        ),
        (
            {"input": "Hi", "tools": [{**TOOL, "name": "bad name"}]},
            "InvalidChatParameter",
            "tools.[0].name",
        ),
        (
            {"input": "Hi", "tools": [TOOL], "tool_choice": {"type": "function", "name": "other"}},
            "InvalidChatParameter",
            "tool_choice.name",
        ),
        (
            {
                "input": "Hi",
                "text": {
                    "format": {
                        "type": "json_schema",
                        "name": "A",
                        "strict": True,
                        "schema": {"type": "object", "properties": {}},
                    }
                },
            },
            "InvalidStrictSchema",
            "text.format",
        ),
        (
            {"input": "Hi", "reasoning": {"effort": "huge"}},
            "InvalidChatParameter",
            "reasoning.effort",
        ),
    ],
)
def test_chat_refusals_name_the_field_as_the_client_wrote_it(
    body: dict[str, Any], code: str, param: str
) -> None:
    error = refusal(body)
    assert (error.code, error.param) == (code, param), error.message
    assert "messages" not in error.message


# ----------------------------------------------------------------------------- the way out

REQUEST_ID = "r1"


def request_of(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    _, request, echo = admitted({"input": "Hi", **body})
    return request, echo


@pytest.mark.parametrize(
    ("fields", "status", "incomplete", "kinds"),
    [
        ({}, "completed", None, ["message"]),
        (
            {"content": None, "tool_calls": [CALL], "finish_reason": "tool_calls"},
            "completed",
            None,
            ["function_call"],
        ),
        (
            {"reasoning_content": "Hmm.", "tool_calls": [CALL], "finish_reason": "tool_calls"},
            "completed",
            None,
            ["reasoning", "message", "function_call"],
        ),
        ({"finish_reason": "length"}, "incomplete", "max_output_tokens", ["message"]),
        ({"finish_reason": "content_filter"}, "incomplete", "content_filter", ["message"]),
    ],
)
def test_the_response_object_is_openais(
    fields: dict[str, Any], status: str, incomplete: str | None, kinds: list[str]
) -> None:
    request, echo = request_of({"tools": [TOOL]})
    body = finished(reply(**fields), request, echo, 100, 101)
    assert_response(body)
    assert (body["status"], body["id"]) == (status, f"resp_{REQUEST_ID}")
    assert body["incomplete_details"] == ({"reason": incomplete} if incomplete else None)
    assert [item["type"] for item in body["output"]] == kinds
    assert body["usage"]["input_tokens"] == 5
    assert body["x_horde"]["kudos"] == 3.0


def events_of(
    source: list[Delta | Final], request: dict[str, Any], echo: dict[str, Any]
) -> list[dict[str, Any]]:
    async def events() -> ReplyEvents:
        for event in source:
            yield event

    async def collect() -> list[bytes]:
        stream = ResponseEvents(REQUEST_ID, request, echo, lambda: "m")
        return [data async for data in stream.stream(events())]

    out = []
    for data in asyncio.run(collect()):
        name, line, blank = data.decode().split("\n", 2)
        event = json.loads(line.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        assert blank == "\n"
        assert_response_event(event)
        assert event["sequence_number"] == len(out)
        out.append(event)
    return out


def test_relayed_deltas_then_the_rest_of_the_reply() -> None:
    request, echo = request_of({"tools": [TOOL]})
    final = reply(reasoning_content="Think it over.", tool_calls=[CALL], finish_reason="tool_calls")
    events = events_of(
        [
            Delta("", reasoning="Think "),
            Delta("Hel", reasoning="it over."),
            Delta("lo"),
            Final(final),
        ],
        request,
        echo,
    )
    by_type = [e["type"] for e in events]
    assert by_type[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert by_type[-1] == "response.completed"
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    thought = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert (text, thought) == ("Hello.", "Think it over.")
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done == events[-1]["response"]["output"]
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [
        0,
        1,
        2,
    ]


def test_content_before_any_reasoning_puts_the_reasoning_after_the_message() -> None:
    request, echo = request_of({})
    events = events_of([Delta("Hel"), Final(reply(reasoning_content="Late."))], request, echo)
    assert [i["type"] for i in events[-1]["response"]["output"]] == ["message", "reasoning"]
    added = [
        (e["output_index"], e["item"]["type"])
        for e in events
        if e["type"] == "response.output_item.added"
    ]
    assert added == [(0, "message"), (1, "reasoning")]


def test_a_reply_that_diverges_from_the_relayed_text_ends_the_stream() -> None:
    request, echo = request_of({})
    with pytest.raises(StreamDiverged):
        events_of([Delta("Goodbye"), Final(reply())], request, echo)


def test_the_error_event_is_openais() -> None:
    request, echo = request_of({})
    stream = ResponseEvents(REQUEST_ID, request, echo, lambda: "m")
    name, line, _ = stream.failure(StreamDiverged()).decode().split("\n", 2)
    event = json.loads(line.removeprefix("data: "))
    assert name == "event: error"
    assert_response_event(event)
    assert (event["code"], event["sequence_number"]) == ("stream_diverged", 0)
