"""spec/streaming.yaml: the delta-streaming rule and the checks its codegen target adds."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from codegen.errors import SpecErrors
from codegen.spec import load_spec
from codegen.targets.streaming import SOURCE, _check
from generated.chat.names import PARAM_RESPONSE_FORMAT, PARAM_STREAM, PARAM_TOOLS
from generated.streaming import DELTA_RULE, END_KINDS, ENTRY_KINDS, KIND_DELTA

TOOL = {"type": "function", "function": {"name": "f", "parameters": {}}}


@pytest.mark.parametrize(
    ("request_body", "streams"),
    [
        ({PARAM_STREAM: True}, True),
        ({PARAM_STREAM: True, PARAM_RESPONSE_FORMAT: {"type": "text"}}, True),
        ({PARAM_STREAM: True, PARAM_RESPONSE_FORMAT: {"type": "json_object"}}, False),
        ({PARAM_STREAM: True, PARAM_RESPONSE_FORMAT: {"type": "json_schema"}}, False),
        ({PARAM_STREAM: True, PARAM_TOOLS: [TOOL]}, False),
        ({PARAM_STREAM: False}, False),
        ({}, False),
    ],
)
def test_only_plain_streamed_requests_stream_deltas(
    request_body: dict[str, Any], streams: bool
) -> None:
    assert DELTA_RULE.streams_deltas(request_body) is streams


def test_every_kind_but_delta_ends_a_generation() -> None:
    assert set(ENTRY_KINDS) - END_KINDS == {KIND_DELTA}


@pytest.mark.parametrize(
    ("setting", "value", "problem"),
    [("pacing_smoothing", 1.5, "above 1"), ("stream_max_entries", 10, "below generation_chars")],
)
def test_codegen_refuses_inconsistent_numbers(setting: str, value: float, problem: str) -> None:
    data = copy.deepcopy(load_spec()[SOURCE])
    _check(data)
    data["settings"][setting]["value"] = value
    with pytest.raises(SpecErrors, match=problem):
        _check(data)
