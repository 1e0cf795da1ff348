"""The worker's pure pieces: reply parsing, reasoning split, stream folding, body mapping."""

from __future__ import annotations

import json
from typing import Any

import pytest

from generated.errors import BackendInvalidReply
from runtime.worker.backend_kinds import (
    GENERIC,
    LLAMA_CPP_PYTHON,
    VLLM,
    backend_completion,
    chat_body,
    detect_kind,
)
from runtime.worker.counter import ByteBoundCounter
from runtime.worker.reply import StreamAccumulator, parse_chat_completion, split_reasoning

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


def _completion(message: dict, finish: str | None = "stop", usage: dict | None = None) -> dict:
    return {"choices": [{"message": message, "finish_reason": finish}], "usage": usage}


def test_plain_reply_with_usage_and_reasoning_tokens() -> None:
    usage = {
        "prompt_tokens": 9,
        "completion_tokens": 4,
        "completion_tokens_details": {"reasoning_tokens": 2},
    }
    reply = parse_chat_completion(_completion({"content": "Hi"}, usage=usage))
    assert (reply.content, reply.reasoning_content, reply.tool_calls) == ("Hi", None, [])
    assert reply.usage == {"prompt_tokens": 9, "completion_tokens": 4, "reasoning_tokens": 2}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("<think>plan it</think>\n\nThe answer", ("The answer", "plan it")),
        ("  <think>all thought, cut off", (None, "all thought, cut off")),
        ("no think block", ("no think block", None)),
        ("<think></think>x", ("x", None)),
    ],
)
def test_think_blocks_become_reasoning(content: str, expected: tuple) -> None:
    assert split_reasoning(content) == expected


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_fields_are_kept_apart_from_the_content(field: str) -> None:
    reply = parse_chat_completion(_completion({"content": "A", field: "because"}))
    assert (reply.content, reply.reasoning_content) == ("A", "because")


def test_tool_calls_are_normalised_and_finish_follows_them() -> None:
    message = {
        "content": "",
        "tool_calls": [
            {"id": "c1", "function": {"name": "f", "arguments": '{"a": 1}  \n'}},
            {"function": {"name": "g", "arguments": {"b": 2}}},
        ],
    }
    reply = parse_chat_completion(_completion(message, finish="stop"))
    assert reply.finish_reason == "tool_calls"
    assert reply.content is None
    assert reply.tool_calls[0] == {
        "id": "c1",
        "type": "function",
        "function": {"name": "f", "arguments": '{"a": 1}'},
    }
    assert reply.tool_calls[1]["id"].startswith("call_")
    assert json.loads(reply.tool_calls[1]["function"]["arguments"]) == {"b": 2}


def test_legacy_function_call_becomes_a_tool_call() -> None:
    message = {"content": None, "function_call": {"name": "f", "arguments": "{}"}}
    reply = parse_chat_completion(_completion(message, finish="function_call"))
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls[0]["function"]["name"] == "f"


@pytest.mark.parametrize(
    "body",
    [
        {"choices": []},
        _completion({"content": "x"}, finish=None),
        _completion({"content": "x"}, finish="weird"),
        _completion({"content": 5}),
        _completion({"content": None, "tool_calls": [{"function": {"arguments": "{}"}}]}),
    ],
)
def test_replies_that_cannot_be_submitted_are_invalid(body: dict) -> None:
    with pytest.raises(BackendInvalidReply):
        parse_chat_completion(body)


def test_stream_folds_content_reasoning_and_call_deltas() -> None:
    folded = StreamAccumulator()
    chunks = [
        {"choices": [{"delta": {"role": "assistant", "reasoning_content": "hm"}}]},
        {"choices": [{"delta": {"content": "Hel"}}]},
        {"choices": [{"delta": {"content": "lo"}}]},
        {
            "choices": [
                {"delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]}}
            ]
        },
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]},
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
    ]
    added = [folded.add(chunk) for chunk in chunks]
    assert "".join(added) == "Hello"
    reply = parse_chat_completion(folded.completion())
    assert (reply.content, reply.reasoning_content, reply.finish_reason) == (
        "Hello",
        "hm",
        "tool_calls",
    )
    assert reply.tool_calls[0]["function"] == {"name": "f", "arguments": "{}"}
    assert reply.usage["prompt_tokens"] == 3


def test_a_stream_without_finish_reason_is_a_failure() -> None:
    folded = StreamAccumulator()
    folded.add({"choices": [{"delta": {"content": "partial"}}]})
    with pytest.raises(BackendInvalidReply, match="finish_reason"):
        folded.completion()


def test_kind_detection_by_owner_and_override() -> None:
    assert detect_kind({"owned_by": "me"}) is LLAMA_CPP_PYTHON
    assert detect_kind({"owned_by": "vllm"}) is VLLM
    assert detect_kind({"owned_by": "someone"}) is GENERIC
    assert detect_kind({"owned_by": "me"}, "vllm") is VLLM


def test_llama_cpp_python_mapping() -> None:
    payload = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            }
        ],
        "tools": [TOOL],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}},
        "reasoning_effort": "medium",
        "max_tokens": None,
        "temperature": 0.5,
    }
    body = chat_body(LLAMA_CPP_PYTHON, payload, "m")
    assert body["messages"] == [{"role": "user", "content": "ab"}]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert body["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert "reasoning_effort" not in body
    assert "parallel_tool_calls" not in body
    assert "max_tokens" not in body
    assert body["temperature"] == 0.5


def test_openai_shaped_backends_get_the_payload_as_it_is() -> None:
    payload = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}],
        "tools": [TOOL, {**TOOL, "function": {**TOOL["function"], "name": "g"}}],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}},
        "reasoning_effort": "low",
        "seed": 3,
    }
    body = chat_body(VLLM, payload, "m", stream=True)
    for key in ("messages", "tools", "tool_choice", "parallel_tool_calls", "response_format"):
        assert body[key] == payload[key]
    assert (body["reasoning_effort"], body["seed"], body["stream"]) == ("low", 3, True)


CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
TOOL_LOOP = [
    {"role": "user", "content": "go"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "done"}]},
    {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
]


def test_llama_cpp_python_gets_null_content_as_empty_and_part_lists_joined() -> None:
    # llama-cpp-python answers 500 to content null beside tool_calls and to a part list on
    # any role but user (tests/integration/test_llama_cpp_facts.py).
    body = chat_body(LLAMA_CPP_PYTHON, {"messages": TOOL_LOOP, "tools": [TOOL]}, "m")
    assert body["messages"] == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "done"},
        {"role": "assistant", "content": "no"},
    ]
    assert TOOL_LOOP[1]["content"] is None  # the job's payload is not changed


def test_openai_shaped_backends_get_null_content_as_it_is() -> None:
    body = chat_body(VLLM, {"messages": TOOL_LOOP, "tools": [TOOL]}, "m")
    assert body["messages"] == TOOL_LOOP


def test_single_required_tool_stays_required_on_other_backends() -> None:
    body = chat_body(GENERIC, {"messages": [], "tools": [TOOL], "tool_choice": "required"}, "m")
    assert body["tool_choice"] == "required"


def test_byte_bound_counts_bytes_plus_fixed_part_plus_tool_overhead() -> None:
    messages = [{"role": "user", "content": "é"}]
    plain = len(json.dumps(messages, ensure_ascii=False).encode())
    bound = ByteBoundCounter(fixed=7, tool_overhead=100)
    assert bound.count(messages, None) == plain + 7
    with_tools = bound.count(messages, [TOOL])
    assert with_tools == plain + 7 + len(json.dumps([TOOL]).encode()) + 100


REQUIRED_TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("first", "second")
]
REQUIRED = {
    "messages": [{"role": "user", "content": "hi"}],
    "tools": REQUIRED_TOOLS,
    "tool_choice": "required",
}


def _answered(content: str, finish: str = "stop") -> dict[str, Any]:
    message = {"role": "assistant", "content": content}
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def test_required_among_several_goes_as_a_grammar_of_one_call() -> None:
    body = chat_body(LLAMA_CPP_PYTHON, REQUIRED, "m")
    assert body["tools"] == REQUIRED_TOOLS
    assert body["tool_choice"] == "auto"
    schema = body["response_format"]["schema"]
    assert [c["properties"]["name"] for c in schema["anyOf"]] == [
        {"const": "first"},
        {"const": "second"},
    ]
    assert chat_body(GENERIC, REQUIRED, "m")["tool_choice"] == "required"
    assert "response_format" not in chat_body(GENERIC, REQUIRED, "m")


def test_the_forced_content_comes_back_as_the_call() -> None:
    forced = _answered(json.dumps({"name": "second", "arguments": {"x": 1}}))
    (choice,) = backend_completion(LLAMA_CPP_PYTHON, REQUIRED, forced)["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "second", "arguments": '{"x": 1}'}


def test_content_that_is_no_call_stays_content() -> None:
    """Cut off by max_tokens, or naming no tool: the horde refuses a forced choice without a
    call under strict, so nothing is made up here."""
    for content in ('{"name": "sec', json.dumps({"name": "third", "arguments": {}})):
        cut = _answered(content, "length")
        assert backend_completion(LLAMA_CPP_PYTHON, REQUIRED, cut) == cut
    named = {**REQUIRED, "tool_choice": {"type": "function", "function": {"name": "first"}}}
    call_text = _answered(json.dumps({"name": "first", "arguments": {}}))
    assert backend_completion(LLAMA_CPP_PYTHON, named, call_text) == call_text
