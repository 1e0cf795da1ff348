"""flatten_messages, truncate_oldest and operation_fingerprint."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from codegen.errors import SpecErrors
from codegen.spec import SPEC_ROOT, load_spec
from codegen.targets import chat_reply
from generated.chat.tables import CHARS_PER_TOKEN_ESTIMATE, CONTENT_PARTS
from generated.errors import NoWorkerSupportsLimit
from runtime.contract.conversation import flatten_messages, truncate_oldest
from runtime.contract.dispatch import operation_fingerprint
from runtime.contract.validator import validate_chat_request

CPT = CHARS_PER_TOKEN_ESTIMATE
IMAGE = "data:image/png;base64," + "QUJD" * 500


def test_every_content_part_type_and_message_shape_is_flattened() -> None:
    messages = validate_chat_request(
        {
            "model": "m",
            "tools": [{"type": "function", "function": {"name": "get"}}],
            "messages": [
                {"role": "developer", "content": "Be terse."},
                {"role": "system", "content": [{"type": "text", "text": "No jokes."}]},
                {
                    "role": "user",
                    "name": "ann",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": IMAGE}},
                        {"type": "image_url", "image_url": {"url": "https://example.org/a.png"}},
                    ],
                },
                {"role": "assistant", "content": [{"type": "refusal", "refusal": "Cannot."}]},
                {
                    "role": "assistant",
                    "content": None,
                    "refusal": "Still no.",
                    "tool_calls": [
                        {
                            "id": "call_9",
                            "type": "function",
                            "function": {"name": "get", "arguments": '{"q": 1}'},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "call_9", "content": "42"},
            ],
        }
    )["messages"]
    assert {
        p["type"] for m in messages if isinstance(m["content"], list) for p in m["content"]
    } == set(CONTENT_PARTS)
    lines = flatten_messages(messages).split("\n")
    assert lines[0] == "developer: Be terse."
    assert lines[1] == "system: No jokes."
    assert lines[2].startswith("user (ann): What is this? [image]")
    assert "https://example.org/a.png" in lines[2]
    assert "QUJD" not in lines[2]
    assert "Cannot." in lines[3]
    assert "Still no." in lines[4]
    assert "get" in lines[4]
    assert '{"q": 1}' in lines[4]
    assert lines[5] == "tool (call_9): 42"


def test_codegen_refuses_a_part_type_flatten_cannot_render(tmp_path: Path) -> None:
    spec_dir = tmp_path / "spec"
    shutil.copytree(SPEC_ROOT, spec_dir)
    path = spec_dir / "chat/messages.yaml"
    text = path.read_text()
    anchor = "content_parts:\n"
    assert anchor in text
    path.write_text(text.replace(anchor, anchor + "  video:\n    keys: {video: {type: string}}\n"))
    with pytest.raises(SpecErrors, match="video"):
        chat_reply.build(load_spec(spec_dir))


def msg(role: str, tokens: int, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": "x" * (tokens * CPT), **extra}


def calls(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "get", "arguments": "y" * 97}}
            for i in ids
        ],
    }


CONVERSATION = [
    msg("system", 10),
    msg("user", 100),  # turn 1
    msg("assistant", 100),
    msg("developer", 10),
    msg("user", 100),  # turn 2
    calls("a", "b"),
    msg("tool", 50, tool_call_id="a"),
    msg("tool", 50, tool_call_id="b"),
    msg("assistant", 20),
    msg("user", 30),  # latest turn
    msg("assistant", 5),
]


def roles(messages: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in messages]


def test_a_conversation_that_fits_comes_back_whole() -> None:
    assert truncate_oldest(CONVERSATION, 10_000) == CONVERSATION


def test_the_oldest_turn_goes_first_and_only_as_many_turns_as_needed() -> None:
    kept = truncate_oldest(CONVERSATION, 400)
    assert roles(kept) == [
        "system",
        "developer",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert kept[2] is CONVERSATION[4]


def test_system_developer_and_the_latest_user_turn_are_always_kept() -> None:
    kept = truncate_oldest(CONVERSATION, 60)
    assert kept == [CONVERSATION[0], CONVERSATION[3], CONVERSATION[9], CONVERSATION[10]]


def test_a_tool_call_and_its_answers_go_together_and_the_result_stays_valid() -> None:
    for budget in (60, 300, 400, 500):
        kept = truncate_oldest(CONVERSATION, budget)
        call_ids = {c["id"] for m in kept for c in m.get("tool_calls") or []}
        answered = {m["tool_call_id"] for m in kept if m["role"] == "tool"}
        assert call_ids == answered
        validate_chat_request({"model": "m", "messages": kept})  # OpenAI's history rules


def test_reserved_tokens_count_against_the_context() -> None:
    assert len(truncate_oldest(CONVERSATION, 500)) == len(CONVERSATION) - 2
    assert len(truncate_oldest(CONVERSATION, 500, reserved_tokens=200)) == 4


def test_the_limit_gap_when_even_the_kept_messages_do_not_fit() -> None:
    with pytest.raises(NoWorkerSupportsLimit) as caught:
        truncate_oldest(CONVERSATION, 80, reserved_tokens=40)
    assert caught.value.fields == {"limit": "max_context_length", "value": 95, "maximum": 80}
    assert caught.value.param == "max_context_length"


def request(**extra: Any) -> dict[str, Any]:
    body = {"models": ["a", "b", "c"], "messages": [{"role": "user", "content": "hi"}]}
    return validate_chat_request({**body, **extra})


def test_the_fingerprint_is_stable_and_models_count_as_a_set() -> None:
    first = operation_fingerprint(request())
    assert first == operation_fingerprint(request())
    assert len(first) == 64
    assert int(first, 16) >= 0
    assert operation_fingerprint(request(models=["c", "a", "b"])) == first
    assert operation_fingerprint(request(models=["b", "a", "c", "a"])) == first
    raw = {"models": ["c", "b", "a"], "messages": [{"role": "user", "content": "hi"}]}
    assert operation_fingerprint(raw) == first  # even before validation sorts the list


def test_the_fingerprint_ignores_key_order_and_values_at_their_default() -> None:
    req = request(temperature=0.5)
    reordered = dict(reversed(list(req.items())))
    assert operation_fingerprint(reordered) == operation_fingerprint(req)
    assert operation_fingerprint(request(temperature=1)) == operation_fingerprint(request())


@pytest.mark.parametrize(
    "change",
    [
        {"models": ["a", "b"]},
        {"models": ["a", "b", "d"]},
        {"messages": [{"role": "user", "content": "hi!"}]},
        {"messages": [{"role": "system", "content": "hi"}]},
        {"temperature": 0.5},
        {"max_tokens": 100},
        {"stream": True},
        {"seed": 7},
        {"horde": {"conformance": "best_effort"}},
        {"tools": [{"type": "function", "function": {"name": "get"}}]},
        {"response_format": {"type": "json_object"}},
    ],
    ids=lambda c: next(iter(c)),
)
def test_any_other_change_changes_the_fingerprint(change: dict[str, Any]) -> None:
    assert operation_fingerprint(request(**change)) != operation_fingerprint(request())
