"""verify_chat_reply: each rule refused and passed, under strict and best_effort."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest

from codegen.errors import SpecErrors
from codegen.spec import SPEC_ROOT, load_spec
from generated.errors import ChatReplyRejected
from runtime.contract.validator import validate_chat_request
from runtime.contract.verification import verify_chat_reply

STRICT, BEST_EFFORT = "strict", "best_effort"
MODES = (STRICT, BEST_EFFORT)
TOOLS = [
    {"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "put", "parameters": {"type": "object"}}},
]
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
    "additionalProperties": False,
}


def request(mode: str, **extra: Any) -> dict[str, Any]:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    if mode == BEST_EFFORT:
        body["horde"] = {"conformance": BEST_EFFORT}
    return validate_chat_request(body)


def call(name: str, call_id: str = "call_1", arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def reply(content: str | None = None, *calls: dict[str, Any], finish: str = "stop") -> dict:
    return {"content": content, "tool_calls": list(calls), "finish_reason": finish}


def refused(req: dict[str, Any], rep: dict[str, Any], **kwargs: Any) -> str:
    with pytest.raises(ChatReplyRejected) as caught:
        verify_chat_reply(req, rep, **kwargs)
    assert caught.value.native_status == 400
    assert caught.value.native_body()["rc"] == "ChatReplyRejected"
    return caught.value.fields["rule"]


def test_a_plain_reply_passes_unchanged_and_the_input_is_not_modified() -> None:
    rep = reply("hello")
    kept = copy.deepcopy(rep)
    assert verify_chat_reply(request(STRICT), rep) == kept
    assert rep == kept


@pytest.mark.parametrize("mode", MODES)
def test_a_call_to_a_function_outside_the_tools_is_refused_in_both_modes(mode: str) -> None:
    req = request(mode, tools=TOOLS)
    assert refused(req, reply(None, call("delete"))) == "unknown_function"
    assert refused(request(mode), reply(None, call("get"))) == "unknown_function"
    assert verify_chat_reply(req, reply(None, call("get")))["tool_calls"] == [call("get")]


@pytest.mark.parametrize("mode", MODES)
def test_two_calls_sharing_an_id_are_refused_in_both_modes(mode: str) -> None:
    req = request(mode, tools=TOOLS)
    assert refused(req, reply(None, call("get", "a"), call("put", "a"))) == "duplicate_call_id"
    both = reply(None, call("get", "a"), call("put", "b"))
    assert len(verify_chat_reply(req, both)["tool_calls"]) == 2


def test_a_call_under_none_is_refused_only_under_strict() -> None:
    rep = reply(None, call("get"))
    assert refused(request(STRICT, tools=TOOLS, tool_choice="none"), rep) == "tool_call_under_none"
    assert verify_chat_reply(request(BEST_EFFORT, tools=TOOLS, tool_choice="none"), rep) == rep
    assert verify_chat_reply(request(STRICT, tools=TOOLS, tool_choice="none"), reply("ok"))


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get"}}], ids=str
)
def test_a_missing_call_under_a_forced_choice_is_refused_only_under_strict(choice: Any) -> None:
    rep = reply("I would rather talk")
    assert refused(request(STRICT, tools=TOOLS, tool_choice=choice), rep) == "missing_tool_call"
    assert verify_chat_reply(request(BEST_EFFORT, tools=TOOLS, tool_choice=choice), rep) == rep
    answered = reply(None, call("get"), finish="tool_calls")
    assert verify_chat_reply(request(STRICT, tools=TOOLS, tool_choice=choice), answered)


def test_auto_does_not_force_a_call() -> None:
    assert verify_chat_reply(request(STRICT, tools=TOOLS), reply("no call needed"))


def test_a_call_to_another_function_under_a_named_choice_is_refused_only_under_strict() -> None:
    named = {"type": "function", "function": {"name": "get"}}
    rep = reply(None, call("put"))
    strict = request(STRICT, tools=TOOLS, tool_choice=named)
    assert refused(strict, rep) == "other_function_called"
    assert refused(strict, reply(None, call("get", "a"), call("put", "b"))) == (
        "other_function_called"
    )
    assert verify_chat_reply(request(BEST_EFFORT, tools=TOOLS, tool_choice=named), rep) == rep
    assert verify_chat_reply(request(STRICT, tools=TOOLS, tool_choice="required"), rep) == rep


@pytest.mark.parametrize(
    "content", ["plain words", "[1, 2]", '"a string"', '{"a": NaN}', "{'a': 1}", None]
)
def test_content_that_is_not_a_json_object_is_refused_only_under_strict(content: Any) -> None:
    fmt = {"type": "json_object"}
    rep = reply(content)
    assert refused(request(STRICT, response_format=fmt), rep) == "content_not_json"
    assert verify_chat_reply(request(BEST_EFFORT, response_format=fmt), rep) == rep


def test_a_json_object_passes_and_so_does_any_content_without_a_json_format() -> None:
    assert verify_chat_reply(
        request(STRICT, response_format={"type": "json_object"}), reply('  {"a": [1, 2]}\n')
    )
    assert verify_chat_reply(request(STRICT, response_format={"type": "text"}), reply("words"))


def test_json_schema_needs_json_but_checks_the_schema_only_when_strict() -> None:
    loose = {"type": "json_schema", "json_schema": {"name": "w", "schema": SCHEMA}}
    req = request(STRICT, response_format=loose)
    assert refused(req, reply("not json")) == "content_not_json"
    assert verify_chat_reply(req, reply("[1]"))  # valid JSON; a non-strict schema is not held


def test_content_not_matching_a_strict_schema_is_refused_only_under_strict() -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "w", "strict": True, "schema": SCHEMA}}
    wrong = reply('{"city": "Oslo", "days": "three"}')
    with pytest.raises(ChatReplyRejected) as caught:
        verify_chat_reply(request(STRICT, response_format=fmt), wrong)
    assert caught.value.fields["rule"] == "schema_mismatch"
    assert "$.days" in caught.value.message
    assert "'w'" in caught.value.message
    extra = reply('{"city": "Oslo", "days": 3, "sun": true}')
    assert refused(request(STRICT, response_format=fmt), extra) == "schema_mismatch"
    assert verify_chat_reply(request(BEST_EFFORT, response_format=fmt), wrong) == wrong
    right = reply('{"city": "Oslo", "days": 3}')
    assert verify_chat_reply(request(STRICT, response_format=fmt), right) == right


@pytest.mark.parametrize("finish", ["length", "content_filter"])
def test_visibly_cut_off_content_is_not_held_to_the_json_format(finish: str) -> None:
    # Visibly: the output estimate (12 characters, floored at 20 tokens) reached max_tokens.
    rep = reply('{"city": "Os', finish=finish)
    fmt = {"type": "json_object"}
    assert verify_chat_reply(request(STRICT, response_format=fmt, max_tokens=20), rep)
    long_cut = reply('{"city": "' + "O" * 400, finish=finish)
    assert verify_chat_reply(request(STRICT, response_format=fmt, max_tokens=100), long_cut)
    # the output length the job ran under (the row's max_length) when max_tokens was absent
    assert verify_chat_reply(request(STRICT, response_format=fmt), long_cut, max_length=100)


@pytest.mark.parametrize("finish", ["length", "content_filter"])
def test_a_cut_off_claim_that_the_reply_does_not_show_does_not_exempt_it_from_strict_json(
    finish: str,
) -> None:
    """A short non-JSON reply to max_tokens 1000 that claims a cut is still refused as not JSON."""
    fmt = {"type": "json_object"}
    short = reply("Sure! Here is", finish=finish)
    assert refused(request(STRICT, response_format=fmt, max_tokens=1000), short) == (
        "content_not_json"
    )
    assert refused(request(STRICT, response_format=fmt), short, max_length=512) == (
        "content_not_json"
    )
    assert refused(request(STRICT, response_format=fmt), short) == "content_not_json"
    schema_fmt = {
        "type": "json_schema",
        "json_schema": {"name": "w", "strict": True, "schema": SCHEMA},
    }
    partial = reply('{"city": "Oslo"}', finish=finish)
    assert refused(request(STRICT, response_format=schema_fmt, max_tokens=1000), partial) == (
        "schema_mismatch"
    )
    # best_effort holds no content to the JSON, cut off or not
    assert verify_chat_reply(request(BEST_EFFORT, response_format=fmt, max_tokens=1000), short)


def test_a_tool_call_reply_without_content_is_not_held_to_the_json_format() -> None:
    req = request(STRICT, tools=TOOLS, response_format={"type": "json_object"})
    assert verify_chat_reply(req, reply(None, call("get"), finish="tool_calls"))
    assert refused(req, reply("not json", call("get"))) == "content_not_json"


def test_parallel_tool_calls_false_keeps_only_the_first_call_under_strict() -> None:
    rep = reply(None, call("get", "a"), call("put", "b"), finish="tool_calls")
    kept = copy.deepcopy(rep)
    reduced = verify_chat_reply(request(STRICT, tools=TOOLS, parallel_tool_calls=False), rep)
    assert reduced["tool_calls"] == [call("get", "a")]
    assert rep == kept  # the submitted reply itself is untouched
    best = verify_chat_reply(request(BEST_EFFORT, tools=TOOLS, parallel_tool_calls=False), rep)
    assert len(best["tool_calls"]) == 2
    assert len(verify_chat_reply(request(STRICT, tools=TOOLS), rep)["tool_calls"]) == 2


def test_the_rules_judge_the_reduced_reply() -> None:
    """A dropped second call is not held against the worker; the kept one still is."""
    req = request(STRICT, tools=TOOLS, parallel_tool_calls=False)
    assert verify_chat_reply(req, reply(None, call("get", "a"), call("nope", "a")))
    assert refused(req, reply(None, call("nope", "a"), call("get", "b"))) == "unknown_function"
    best = request(BEST_EFFORT, tools=TOOLS, parallel_tool_calls=False)
    assert refused(best, reply(None, call("get", "a"), call("nope", "b"))) == "unknown_function"


def test_the_spec_refuses_a_rule_the_code_does_not_implement(tmp_path: Path) -> None:
    spec_dir = tmp_path / "spec"
    shutil.copytree(SPEC_ROOT, spec_dir)
    path = spec_dir / "chat/verification.yaml"
    text = path.read_text()
    assert "  duplicate_call_id:\n" in text
    path.write_text(text.replace("  duplicate_call_id:\n", "  duplicate_call_ids:\n"))
    with pytest.raises(SpecErrors, match="duplicate_call_ids"):
        load_spec(spec_dir)
