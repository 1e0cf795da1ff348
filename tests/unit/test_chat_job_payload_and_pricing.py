"""chat_job_payload narrowing and defaults; output_estimate, CHARGE_BASIS and reply_text."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from codegen.spec import load_spec
from generated.chat.tables import SAMPLING_DEFAULTS
from generated.chat.tables_reply import CHARGE_BASIS
from runtime.contract.declaration import parse_worker_declaration
from runtime.contract.dispatch import chat_job_payload
from runtime.contract.pricing import output_estimate, reply_text
from runtime.contract.validator import validate_chat_request

PRICING = load_spec()["chat/pricing.yaml"]
PER_TOKEN, FLOOR = PRICING["chars_per_token"], PRICING["floor_tokens"]
TOOLS = [
    {"type": "function", "function": {"name": "get", "description": "read"}},
    {"type": "function", "function": {"name": "put", "description": "write"}},
]


def request(**extra: Any) -> dict[str, Any]:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    return validate_chat_request(body)


def worker(*features: str, max_length: int = 300) -> dict[str, Any]:
    return parse_worker_declaration(
        {
            "chat_jobs": True,
            "model_id": "m",
            "chat_features": list(features),
            "chat_limits": {"max_length": max_length},
        }
    )


def test_none_sends_no_tool_definitions_and_the_stored_request_keeps_them() -> None:
    req = request(tools=TOOLS, tool_choice="none")
    stored = copy.deepcopy(req)
    payload = chat_job_payload(req, worker("tools"))
    assert "tools" not in payload
    assert "tool_choice" not in payload
    assert req == stored


def test_a_named_function_goes_alone_under_required() -> None:
    req = request(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "put"}})
    payload = chat_job_payload(req, worker("tools"))
    assert payload["tools"] == [TOOLS[1]]
    assert payload["tool_choice"] == "required"
    assert req["tool_choice"] == {"type": "function", "function": {"name": "put"}}
    assert len(req["tools"]) == 2


@pytest.mark.parametrize(("choice", "sent"), [("required", "required"), (None, "auto")])
def test_required_and_auto_send_every_tool(choice: str | None, sent: str) -> None:
    extra = {"tool_choice": choice} if choice else {}
    payload = chat_job_payload(request(tools=TOOLS, **extra), worker("tools"))
    assert payload["tools"] == TOOLS
    assert payload["tool_choice"] == sent


def test_parallel_tool_calls_travels_with_the_tools() -> None:
    payload = chat_job_payload(request(tools=TOOLS, parallel_tool_calls=False), worker("tools"))
    assert payload["parallel_tool_calls"] is False
    assert "parallel_tool_calls" not in chat_job_payload(request(tools=TOOLS), worker("tools"))


def test_every_sampling_field_is_sent_with_openais_default_where_omitted() -> None:
    payload = chat_job_payload(request(temperature=0.2, stop=["END"]), worker())
    for key, default in SAMPLING_DEFAULTS.items():
        assert key in payload
        if key not in ("temperature", "stop", "max_tokens"):
            assert payload[key] == default
    assert payload["temperature"] == 0.2
    assert payload["stop"] == ["END"]


def test_reasoning_effort_medium_goes_only_to_a_worker_declaring_reasoning() -> None:
    assert chat_job_payload(request(), worker("reasoning"))["reasoning_effort"] == "medium"
    assert "reasoning_effort" not in chat_job_payload(request(), worker())
    low = request(reasoning_effort="low")
    assert chat_job_payload(low, worker("reasoning"))["reasoning_effort"] == "low"


def test_developer_goes_as_system_and_response_format_is_sent() -> None:
    req = request(
        messages=[{"role": "developer", "content": "terse"}, {"role": "user", "content": "hi"}],
        response_format={"type": "json_object"},
    )
    payload = chat_job_payload(req, worker())
    assert [m["role"] for m in payload["messages"]] == ["system", "user"]
    assert req["messages"][0]["role"] == "developer"
    assert payload["response_format"] == {"type": "json_object"}
    assert "response_format" not in chat_job_payload(request(), worker())


def test_max_tokens_is_the_output_length_the_lowered_value_or_the_declared_length() -> None:
    assert chat_job_payload(request(max_tokens=40), worker())["max_tokens"] == 40
    both = request(max_tokens=40, max_completion_tokens=30)
    assert chat_job_payload(both, worker())["max_tokens"] == 30
    lowered = chat_job_payload(request(max_tokens=4000), worker(max_length=300), max_tokens=300)
    assert lowered["max_tokens"] == 300
    assert chat_job_payload(request(), worker(max_length=256))["max_tokens"] == 256


def reply(content: str = "", reasoning: str = "", *calls: tuple[str, str]) -> dict[str, Any]:
    return {
        "content": content or None,
        "reasoning_content": reasoning or None,
        "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ],
        "finish_reason": "stop",
        "usage": {"prompt_tokens": 9999, "completion_tokens": 9999, "reasoning_tokens": 9999},
    }


def test_a_short_reply_is_charged_the_floor_and_reported_usage_never_counts() -> None:
    assert output_estimate(reply("hi"), 512) == FLOOR
    assert output_estimate(reply(), 512) == FLOOR


def test_the_estimate_is_characters_over_four_rounded_up() -> None:
    chars = PER_TOKEN * 100
    assert output_estimate(reply("x" * chars), 512) == 100
    assert output_estimate(reply("x" * (chars + 1)), 512) == 101


def test_reasoning_and_each_tool_calls_name_and_arguments_count() -> None:
    base = PER_TOKEN * 50
    assert output_estimate(reply("c" * base, "r" * base), 512) == 100
    args = "a" * (PER_TOKEN * 60 - 3)
    assert output_estimate(reply("", "", ("get", args), ("put", args)), 512) == 120


def test_the_charge_is_capped_at_max_length_even_below_the_floor() -> None:
    assert output_estimate(reply("x" * 4000), 64) == 64
    assert output_estimate(reply("hi"), 16) == 16


def test_charge_basis_is_the_spec_name() -> None:
    assert CHARGE_BASIS == PRICING["charge_basis"] == "output_estimate"


def test_reply_text_is_the_content_then_each_call_without_reasoning() -> None:
    text = reply_text(reply("Sure.", "thinking hard", ("get", '{"city": "Oslo"}')))
    assert text.startswith("Sure.")
    assert "get" in text
    assert '{"city": "Oslo"}' in text
    assert "call_0" in text
    assert "thinking" not in text
    assert reply_text(reply("only words")) == "only words"
    assert reply_text(reply()) == ""
