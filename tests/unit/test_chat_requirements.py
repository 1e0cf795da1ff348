"""Required features and limits, eligibility gaps, the declaration, and sampling payloads."""

from __future__ import annotations

from typing import Any

import pytest

from generated.chat.tables import SAMPLING_DEFAULTS
from generated.errors import (
    InvalidChatDeclaration,
    NoWorkerSupportsFeatures,
    NoWorkerSupportsLimit,
)
from runtime.contract.declaration import parse_worker_declaration
from runtime.contract.messages import messages_for_worker
from runtime.contract.requirements import (
    covered_names,
    declaration_covers,
    features_gap,
    pool_gap,
    required_chat_features,
    required_chat_limits,
)
from runtime.contract.sampling import sampling_payload, tools_for_worker
from runtime.contract.validator import validate_chat_request

USER = {"role": "user", "content": "x" * 300}
TOOL = {"type": "function", "function": {"name": "get"}}
OTHER = {"type": "function", "function": {"name": "put"}}


def request(**extra: Any) -> dict[str, Any]:
    return validate_chat_request({"model": "m", "messages": [USER], **extra})


def best_effort(**extra: Any) -> dict[str, Any]:
    return request(horde={"conformance": "best_effort"}, **extra)


def test_a_plain_strict_request_requires_only_the_overflow_guarantee() -> None:
    assert required_chat_features(request()) == ["prompt_overflow_refused"]
    assert required_chat_features(best_effort()) == []


def test_fields_at_default_require_nothing() -> None:
    req = best_effort(
        reasoning_effort="medium", frequency_penalty=0, response_format={"type": "text"}
    )
    assert required_chat_features(req) == []


def test_forced_tool_choice_requires_a_guarantee_only_under_strict() -> None:
    strict = request(tools=[TOOL], tool_choice="required")
    assert required_chat_features(strict) == [
        "prompt_overflow_refused",
        "tool_choice_enforced",
        "tools",
    ]
    assert required_chat_features(best_effort(tools=[TOOL], tool_choice="required")) == ["tools"]


def test_required_among_several_tools_also_requires_its_own_guarantee() -> None:
    # llama-cpp-python forces a named function (and required over one tool, sent the same
    # way) but not required among several: that case is routed on a guarantee of its own.
    several = request(tools=[TOOL, OTHER], tool_choice="required")
    assert required_chat_features(several) == [
        "prompt_overflow_refused",
        "tool_choice_enforced",
        "tool_choice_required_enforced",
        "tools",
    ]
    get = {"type": "function", "function": {"name": "get"}}
    named = request(tools=[TOOL, OTHER], tool_choice=get)
    assert "tool_choice_required_enforced" not in required_chat_features(named)
    assert "tool_choice_required_enforced" not in required_chat_features(
        request(tools=[TOOL], tool_choice="required")
    )
    assert required_chat_features(best_effort(tools=[TOOL, OTHER], tool_choice="required")) == [
        "tools"
    ]


def test_tool_choice_none_needs_no_tools_feature_and_sends_no_tools() -> None:
    req = best_effort(tools=[TOOL], tool_choice="none")
    assert required_chat_features(req) == []
    assert tools_for_worker(req) == (None, None)


def test_a_named_function_goes_as_that_function_under_required() -> None:
    req = request(
        tools=[TOOL, OTHER], tool_choice={"type": "function", "function": {"name": "put"}}
    )
    assert tools_for_worker(req) == ([OTHER], "required")
    assert req["tool_choice"]["function"]["name"] == "put"  # the stored request keeps it


def test_parallel_tool_calls_false_requires_no_single_call_guarantee() -> None:
    req = request(tools=[TOOL], parallel_tool_calls=False)
    assert "single_tool_call_enforced" not in required_chat_features(req)


def test_response_formats_require_their_features_and_guarantees() -> None:
    schema = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "o", "strict": True, "schema": schema}}
    assert required_chat_features(request(response_format=fmt)) == [
        "json_output_enforced",
        "json_schema",
        "json_schema_enforced",
        "prompt_overflow_refused",
    ]
    assert required_chat_features(best_effort(response_format={"type": "json_object"})) == [
        "json_object"
    ]


def test_images_seed_penalties_and_reasoning_require_features() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAAAAAA"}}
    msg = {"role": "user", "content": [{"type": "text", "text": "see"}, image]}
    req = best_effort(messages=[msg], seed=7, presence_penalty=0.5, reasoning_effort="high")
    assert required_chat_features(req) == ["penalties", "reasoning", "seed", "vision"]
    limits = required_chat_limits(req)
    assert limits["max_images"] == 1
    assert limits["max_image_bytes"] == 6


def test_limits_measure_context_output_and_tool_temperature() -> None:
    req = request(max_tokens=50, tools=[TOOL], temperature=1.5)
    limits = required_chat_limits(req)
    assert limits["max_length"] == 50
    assert limits["tools_max_temperature"] == 1.5
    assert limits["max_context_length"] >= 100 + 50
    assert "tools_max_temperature" not in required_chat_limits(request(temperature=1.5))


def declaration(**keys: Any) -> dict[str, Any]:
    return parse_worker_declaration({"name": "w", "chat_jobs": True, "model_id": "m", **keys})


def test_declaration_defaults_and_pop_fallbacks() -> None:
    d = declaration(max_context_length=4096)
    assert d["chat_features"] == []
    assert d["prompt_jobs"] is True
    assert d["chat_limits"]["max_context_length"] == 4096
    assert d["chat_limits"]["max_length"] == 512
    assert d["chat_limits"]["tools_max_temperature"] is None
    assert parse_worker_declaration({"name": "old"})["chat_jobs"] is False


@pytest.mark.parametrize(
    ("keys", "words"),
    [
        ({"chat_features": ["tool"]}, "did you mean 'tools'"),
        ({"chat_limits": {"max_contxt_length": 5}}, "did you mean 'max_context_length'"),
        ({"chat_limits": {"max_length": 1}}, "chat_limits.max_length"),
        ({"image_transports": ["ftp"]}, "image_transports"),
        ({"model_id": None}, "model_id: required when chat_jobs is true"),
        ({"chat_jobs": False, "prompt_jobs": False}, "prompt_jobs"),
    ],
)
def test_a_malformed_declaration_is_refused(keys: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidChatDeclaration) as info:
        declaration(**keys)
    assert info.value.native_status == 400
    assert words in info.value.message


def test_a_feature_gap_is_a_404_and_a_limit_gap_a_400() -> None:
    req = request(tools=[TOOL], max_tokens=600)
    required, limits = required_chat_features(req), required_chat_limits(req)
    bare = declaration()
    gap = declaration_covers(bare, required, limits)
    assert gap is not None
    assert gap.kind == "features"
    assert set(gap.missing) == {"prompt_overflow_refused", "tools"}
    err = gap.error()
    assert isinstance(err, NoWorkerSupportsFeatures)
    assert err.front_status == 404
    able = declaration(chat_features=["tools", "prompt_overflow_refused"], max_length=512)
    gap = declaration_covers(able, required, limits)
    assert gap is not None
    assert (gap.kind, gap.limit, gap.value, gap.maximum) == (
        "limit",
        "max_length",
        600,
        512,
    )
    assert isinstance(gap.error(), NoWorkerSupportsLimit)
    assert gap.error().front_status == 400
    roomy = declaration(chat_features=["tools", "prompt_overflow_refused"], max_length=1024)
    assert declaration_covers(roomy, required, limits) is None


def test_pool_gap_prefers_the_limit_gap_and_reports_the_largest_limit() -> None:
    req = request(tools=[TOOL], max_tokens=900)
    required, limits = required_chat_features(req), required_chat_limits(req)
    feats = ["tools", "prompt_overflow_refused"]
    small, mid = (
        declaration(chat_features=feats, max_length=256),
        declaration(chat_features=feats, max_length=800),
    )
    gap = pool_gap([small, mid], required, limits)
    assert gap is not None
    assert (gap.kind, gap.maximum) == ("limit", 800)
    # a worker without the features beside one with them but too small: the limit (400)
    for pool in ([declaration(), small], [small, declaration()]):
        mixed = pool_gap(pool, required, limits)
        assert mixed is not None
        assert (mixed.kind, mixed.limit, mixed.maximum) == ("limit", "max_length", 256)
    assert pool_gap([declaration()], required, limits).kind == "features"
    assert (
        pool_gap([small, declaration(chat_features=feats, max_length=1000)], required, limits)
        is None
    )


def test_sampling_payload_fills_openai_defaults_and_reasoning_for_reasoning_workers() -> None:
    plain = sampling_payload(request(), [])
    assert plain == SAMPLING_DEFAULTS
    assert plain["temperature"] == 1
    assert plain["top_p"] == 1
    assert plain["presence_penalty"] == 0
    assert "reasoning_effort" not in plain
    req = request(temperature=0.2, max_completion_tokens=64, max_tokens=99)
    payload = sampling_payload(req, ["reasoning"])
    assert payload["temperature"] == 0.2
    assert payload["max_tokens"] == 64
    assert payload["reasoning_effort"] == "medium"
    assert (
        sampling_payload(request(reasoning_effort="low"), ["reasoning"])["reasoning_effort"]
        == "low"
    )


def test_developer_messages_go_to_the_worker_as_system() -> None:
    req = request(messages=[{"role": "developer", "content": "rules"}, USER])
    assert req["messages"][0]["role"] == "developer"
    assert [m["role"] for m in messages_for_worker(req["messages"])] == ["system", "user"]


def test_a_scoped_overflow_guarantee_covers_only_requests_without_tools() -> None:
    # A byte-bound worker without --template-overhead declares tools and
    # prompt_overflow_refused with its scope prompt_overflow_refused_except_tools.
    scoped = declaration(
        chat_features=["tools", "prompt_overflow_refused", "prompt_overflow_refused_except_tools"]
    )
    strict_tools = request(tools=[TOOL])
    gap = declaration_covers(scoped, required_chat_features(strict_tools), {})
    assert gap is not None
    assert gap.missing == ("prompt_overflow_refused",)
    assert declaration_covers(scoped, required_chat_features(best_effort(tools=[TOOL])), {}) is None
    assert declaration_covers(scoped, required_chat_features(request()), {}) is None
    assert covered_names(scoped["chat_features"], ["tools"]) == {
        "tools",
        "prompt_overflow_refused_except_tools",
    }
    # tool_choice none sends no tools: the guarantee holds for it.
    none = request(tools=[TOOL], tool_choice="none")
    assert declaration_covers(scoped, required_chat_features(none), {}) is None


def test_a_missing_guarantee_names_the_best_effort_opt_in_and_a_feature_does_not() -> None:
    guarantee = features_gap(["tool_choice_required_enforced"]).message
    assert "tool_choice_required_enforced is a guarantee" in guarantee
    assert 'extra_body={"horde": {"conformance": "best_effort"}}' in guarantee
    assert "best_effort" not in features_gap(["vision"]).message
