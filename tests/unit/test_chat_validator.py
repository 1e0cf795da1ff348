"""The shared chat request validator: every refusal and acceptance rule of the contract."""

from __future__ import annotations

from typing import Any

import pytest

from generated.chat.tables import FRONT_DEFAULT_DROPS
from generated.errors import (
    HordeError,
    InvalidChatParameter,
    InvalidStrictSchema,
    JsonNotMentioned,
    ModelNotFound,
    OrphanToolMessage,
    StreamOptionsWithoutStream,
    ToolCallsNotOnAssistant,
    ToolsRequired,
    UnansweredToolCalls,
    UnsupportedChatParameter,
)
from runtime.contract.validator import drop_front_defaults, validate_chat_request

USER = {"role": "user", "content": "hi"}
TOOL = {"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": "{}"}}


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [USER], **extra}


def refused(payload: object, cls: type[HordeError], param: str | None) -> HordeError:
    with pytest.raises(cls) as info:
        validate_chat_request(payload)
    err = info.value
    assert type(err) is cls
    assert err.param == param
    envelope = err.openai_body()["error"]
    assert envelope["code"] == cls.code
    assert envelope["type"] == cls.openai_type == "invalid_request_error"
    assert err.native_status == cls.front_status == (404 if cls is ModelNotFound else 400)
    assert envelope["param"] == param
    assert envelope["message"] == err.message
    return err


def test_plain_request_is_normalised_and_defaults_count_as_omitted() -> None:
    got = validate_chat_request(
        body(
            temperature=1,
            top_p=1,
            n=1,
            store=False,
            stream=False,
            logprobs=False,
            service_tier="default",
            metadata={},
            seed=None,
            parallel_tool_calls=None,
        )
    )
    assert got == {"model": "m", "messages": [USER]}


def test_unknown_keys_inside_messages_parts_tools_and_tool_choice_are_dropped() -> None:
    tool = {"type": "function", "extra": 1, "function": {"name": "get", "x": 2}}
    msg = {
        "role": "user",
        "name": "ann",
        "sdk_field": 1,
        "content": [{"type": "text", "text": "hi", "cache": 1}],
    }
    got = validate_chat_request(
        {
            "model": "m",
            "messages": [msg],
            "tools": [tool],
            "tool_choice": {"type": "function", "function": {"name": "get", "y": 3}, "z": 4},
        }
    )
    assert got["messages"] == [
        {"role": "user", "name": "ann", "content": [{"type": "text", "text": "hi"}]}
    ]
    assert got["tools"] == [{"type": "function", "function": {"name": "get"}}]
    assert got["tool_choice"] == {"type": "function", "function": {"name": "get"}}


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        (body(frobnicate=1), "frobnicate"),
        (body(response_format={"type": "text", "extra": 1}), "response_format.extra"),
        (body(stream=True, stream_options={"include_usage": True, "x": 1}), "stream_options.x"),
        (body(horde={"quantizations": ["q4"]}), "horde.quantizations"),
        (body(horde={"pinned_model": "x"}), "horde.pinned_model"),
    ],
)
def test_unknown_keys_are_refused_where_openai_refuses_them(payload: dict, param: str) -> None:
    err = refused(payload, UnsupportedChatParameter, param)
    assert err.front_status == 400
    assert param in err.message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("n", 2),
        ("logit_bias", {"1": 5}),
        ("store", True),
        ("service_tier", "flex"),
        ("prompt_cache_key", "k1"),  # user is accepted, so it is not among these
        ("audio", {"voice": "x"}),
        ("functions", [{"name": "f"}]),
        ("web_search_options", {}),
        ("logprobs", True),
        ("verbosity", "high"),
    ],
)
def test_unsupported_values_are_refused_naming_the_key(key: str, value: Any) -> None:
    err = refused(body(**{key: value}), UnsupportedChatParameter, key)
    assert err.message.startswith(f"Unsupported parameter: {key}.")


def test_capability_fields_are_never_dropped_even_at_default() -> None:
    got = validate_chat_request(body(response_format={"type": "text"}, tools=[TOOL]))
    assert got["response_format"] == {"type": "text"}
    assert got["tools"] == [TOOL]


@pytest.mark.parametrize(
    ("payload", "param", "words"),
    [
        (body(temperature="hot"), "temperature", "expected a decimal, but got a string"),
        (body(temperature=2.5), "temperature", "Expected a value <= 2, but got 2.5"),
        (body(top_p=-1), "top_p", "Expected a value >= 0"),
        (body(max_tokens=0), "max_tokens", "Expected a value >= 1"),
        (body(stop=["a", "b", "c", "d", "e"]), "stop", "maximum length 4"),
        ({"model": "m", "messages": []}, "messages", "minimum length 1"),
        ({"messages": [USER]}, "model", "you must provide a model parameter"),
        ({"model": "m"}, "messages", "Missing required parameter: 'messages'"),
        (body(messages=[{"role": "user"}]), "messages.[0].content", "Missing required"),
        (body(messages=[{"role": "robot", "content": "x"}]), "messages.[0].role", "'robot'"),
        (body(horde={"availability_mode": "soon"}), "horde.availability_mode", "'soon'"),
    ],
)
def test_wrong_types_and_bounds_name_the_field(payload: dict, param: str, words: str) -> None:
    err = refused(payload, InvalidChatParameter, param)
    assert words in err.message


def test_a_model_id_with_a_colon_is_not_found() -> None:
    err = refused(body(model="llama:7b"), ModelNotFound, "model")
    assert err.front_status == 404
    assert "llama:7b" in err.message
    refused(body(models=["ok", "a:b"]), ModelNotFound, "models.[1]")


def test_models_is_a_sorted_set() -> None:
    assert validate_chat_request(body(models=["b", "a", "b"]))["models"] == ["a", "b"]


def test_n_other_than_one_is_refused() -> None:
    err = refused(body(n=3), UnsupportedChatParameter, "n")
    assert "one choice" in err.message


@pytest.mark.parametrize("key", ["tool_choice", "parallel_tool_calls"])
def test_tool_settings_without_tools_are_refused_with_openais_message(key: str) -> None:
    value = "auto" if key == "tool_choice" else False
    err = refused(body(**{key: value}), ToolsRequired, key)
    assert err.message == (
        f"Invalid value for '{key}': '{key}' is only allowed when 'tools' are specified."
    )


def test_unanswered_tool_calls_are_refused_with_openais_wording() -> None:
    messages = [USER, {"role": "assistant", "content": None, "tool_calls": [CALL]}, USER]
    err = refused(body(messages=messages, tools=[TOOL]), UnansweredToolCalls, "messages.[1].role")
    assert err.message == (
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        "call_1"
    )


def test_answered_tool_history_is_accepted_and_an_orphan_tool_message_refused() -> None:
    answer = {"role": "tool", "tool_call_id": "call_1", "content": "42"}
    ok = [USER, {"role": "assistant", "tool_calls": [CALL]}, answer, USER]
    assert validate_chat_request(body(messages=ok, tools=[TOOL]))["messages"][2] == answer
    refused(body(messages=[USER, answer]), OrphanToolMessage, "messages.[1].role")


def test_tool_calls_only_on_assistant_messages() -> None:
    bad = {"role": "user", "content": "x", "tool_calls": [CALL]}
    err = refused(body(messages=[bad]), ToolCallsNotOnAssistant, "messages.[0].tool_calls")
    assert "'user'" in err.message


def test_strict_schema_must_close_objects_and_require_every_property() -> None:
    open_schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "out", "strict": True, "schema": open_schema},
    }
    err = refused(body(response_format=fmt), InvalidStrictSchema, "response_format")
    assert err.message == (
        "Invalid schema for response_format 'out': In context=(), 'additionalProperties' "
        "is required to be supplied and to be false."
    )
    optional = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "required": ["a"],
    }
    fmt["json_schema"]["schema"] = optional
    err = refused(body(response_format=fmt), InvalidStrictSchema, "response_format")
    assert err.message.endswith("Missing 'b'.")
    fmt["json_schema"]["strict"] = False
    assert validate_chat_request(body(response_format=fmt))["response_format"] == fmt


def test_stream_options_need_stream() -> None:
    refused(
        body(stream_options={"include_usage": True}), StreamOptionsWithoutStream, "stream_options"
    )


def test_json_object_without_a_mention_of_json_is_accepted_unless_guarded() -> None:
    fmt = {"type": "json_object"}
    assert validate_chat_request(body(response_format=fmt))["response_format"] == fmt
    refused(body(response_format=fmt, horde={"openai_guards": True}), JsonNotMentioned, "messages")
    mention = {"role": "user", "content": "Answer in JSON"}
    guarded = body(messages=[mention], response_format=fmt, horde={"openai_guards": True})
    assert validate_chat_request(guarded)["horde"] == {"openai_guards": True}


def test_refused_content_parts_and_roles() -> None:
    audio = {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}
    refused(body(messages=[audio]), UnsupportedChatParameter, "messages.[0].content.[0].type")
    function = {"role": "function", "name": "f", "content": "x"}
    refused(body(messages=[function]), UnsupportedChatParameter, "messages.[0].role")


def test_body_must_be_an_object() -> None:
    refused(["not", "an", "object"], InvalidChatParameter, None)


def test_front_drops_default_noops_only_at_their_values() -> None:
    assert "store" in FRONT_DEFAULT_DROPS
    assert "n" not in FRONT_DEFAULT_DROPS
    assert drop_front_defaults(body(store=False, service_tier="auto")) == body()
    assert drop_front_defaults(body(store=True)) == body(store=True)
