"""The front's pure pieces: caps, key, body checks, native refusals, usage, chunk order."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from starlette.requests import Request

from generated.errors import (
    FrontAtCapacity,
    HordeUnavailable,
    InvalidAPIKey,
    InvalidJSON,
    ModelNotFound,
    NoWorkerSupportsFeatures,
    NoWorkerSupportsLimit,
    NulByteInPayload,
    StreamDiverged,
    TooManyPrompts,
    UnsupportedChatParameter,
)
from generated.wire import ANONYMOUS_API_KEY
from runtime.front.admission import Admission, api_key_of, checked_request
from runtime.front.errors import error_response, from_native
from runtime.front.responses import Reply, completion
from runtime.front.sse import Delta, Final, chunk_stream
from runtime.front.waiter import gap_error, needs_cancel
from tests.support.openai_schema import assert_chunk, assert_completion, assert_error
from tests.support.replies import reply

REQUEST: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "abcdef"}]}


def test_caps_refuse_per_source_then_global_and_release() -> None:
    admission = Admission(per_source_cap=1, global_cap=2)
    with admission.admit("a"):
        with pytest.raises(FrontAtCapacity, match="per-source"), admission.admit("a"):
            pass
        with (
            admission.admit("b"),
            pytest.raises(FrontAtCapacity, match="global"),
            admission.admit("c"),
        ):
            pass
    assert admission.total == 0
    assert not admission.by_source
    with admission.admit("a"):
        assert admission.total == 1


def request_with(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "headers": raw, "method": "POST", "path": "/"})


def test_bearer_key_and_anonymous_default() -> None:
    assert api_key_of(request_with({})) == ANONYMOUS_API_KEY
    assert api_key_of(request_with({"Authorization": "Bearer abc"})) == "abc"
    assert api_key_of(request_with({"Authorization": "bearer  abc "})) == "abc"
    for bad in ("Basic abc", "Bearer ", "abc", "Bearer " + "x" * 101):
        with pytest.raises(InvalidAPIKey):
            api_key_of(request_with({"Authorization": bad}))


def test_checked_request_drops_front_defaults_and_refuses_as_the_validator() -> None:
    body = {**REQUEST, "store": False, "service_tier": "auto", "temperature": 0.5}
    forward, normalised = checked_request(json.dumps(body).encode())
    assert "store" not in forward
    assert "service_tier" not in forward
    assert forward["temperature"] == 0.5 == normalised["temperature"]
    with pytest.raises(UnsupportedChatParameter) as info:
        checked_request(json.dumps({**REQUEST, "n": 2}).encode())
    assert info.value.param == "n"
    with pytest.raises(ModelNotFound):
        checked_request(json.dumps({**REQUEST, "model": "a:b"}).encode())
    with pytest.raises(InvalidJSON):
        checked_request(b"{not json")
    with pytest.raises(NulByteInPayload):
        checked_request(json.dumps({**REQUEST, "user": "a\x00b"}).encode())
    with pytest.raises(UnsupportedChatParameter) as info:
        checked_request(json.dumps({**REQUEST, "horde": {"dry_run": True}}).encode())
    assert info.value.param == "horde.dry_run"


def test_native_refusals_keep_their_code_and_status() -> None:
    body = json.dumps({"message": "Parallel requests (3) exceeded", "rc": "TooManyPrompts"})
    error = from_native(429, body.encode(), retry_after=4)
    assert isinstance(error, TooManyPrompts)
    assert error.front_status == 429
    response = error_response(error)
    assert response.headers["retry-after"] == "4"
    assert "x-should-retry" not in response.headers
    assert_error(json.loads(response.body))
    passkey = json.dumps({"message": "wrong passkey", "rc": "InvalidServicePasskey"}).encode()
    assert isinstance(from_native(403, passkey), HordeUnavailable)
    assert isinstance(from_native(500, b"<html>"), HordeUnavailable)
    submitted = error_response(from_native(400, passkey), submitted=True)
    assert submitted.headers["x-should-retry"] == "false"


def test_gaps_from_the_first_status() -> None:
    assert gap_error({"missing_features": [], "exceeded_limits": []}) is None
    features = gap_error({"missing_features": ["tools"], "exceeded_limits": []})
    assert isinstance(features, NoWorkerSupportsFeatures)
    assert features.front_status == 404
    limit = gap_error({"exceeded_limits": [{"limit": "max_length", "value": 9, "maximum": 4}]})
    assert isinstance(limit, NoWorkerSupportsLimit)
    assert "max_length 9" in limit.message
    assert needs_cancel(limit)


def test_completion_shape_and_estimated_usage() -> None:
    body = completion(reply(reported={}, reasoning_content="why"), REQUEST, created=1)
    assert_completion(body)
    assert body["usage"]["prompt_tokens"] == 2  # "abcdef": 6 characters over 3
    assert body["usage"]["completion_tokens"] == 3  # "Hello." + "why": 9 over 3
    assert body["x_horde"]["estimated_usage"] is True
    assert body["choices"][0]["message"]["reasoning_content"] == "why"
    counts = {"prompt_tokens": 5, "completion_tokens": 2, "reasoning_tokens": 1}
    hidden = completion(
        reply(reasoning_content="why", reported=counts),
        {**REQUEST, "horde": {"include_reasoning": False}},
    )
    assert "reasoning_content" not in hidden["choices"][0]["message"]
    assert hidden["x_horde"]["estimated_usage"] is False
    assert hidden["usage"]["completion_tokens_details"] == {"reasoning_tokens": 1}


def test_censored_generation_finishes_with_content_filter() -> None:
    status = {"generations": [{"state": "faulted"}, {"state": "censored", "model": "m"}]}
    answered = Reply.from_status("r1", status)
    assert answered is not None
    assert answered.finish_reason == "content_filter"
    assert Reply.from_status("r1", {"generations": [{"state": "faulted"}]}) is None


async def events(*items: Delta | Final) -> Any:
    for item in items:
        yield item


def collect(*items: Delta | Final, request: dict[str, Any] = REQUEST) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        return [c async for c in chunk_stream(events(*items), "r1", request)]

    return asyncio.run(run())


def test_whole_reply_chunks_in_order() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    request = {**REQUEST, "stream": True, "stream_options": {"include_usage": True}}
    chunks = collect(Final(reply(tool_calls=[call], finish_reason="tool_calls")), request=request)
    for chunk in chunks:
        assert_chunk(chunk)
    deltas = [c["choices"][0]["delta"] if c["choices"] else None for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1] == {"content": "Hello."}
    assert deltas[2]["tool_calls"][0]["index"] == 0
    assert chunks[3]["choices"][0]["finish_reason"] == "tool_calls"
    assert deltas[4] is None
    assert chunks[4]["usage"]["total_tokens"] == 7
    assert [c["usage"] for c in chunks[:4]] == [None] * 4


def test_relayed_deltas_reconcile_with_the_final_reply() -> None:
    chunks = collect(Delta("Hel", "m"), Delta("lo", "m"), Final(reply()))
    texts = [c["choices"][0]["delta"].get("content") for c in chunks]
    assert texts == ["", "Hel", "lo", ".", None]
    assert "usage" not in chunks[0]  # without include_usage no usage key at all
    with pytest.raises(StreamDiverged):
        collect(Delta("Goodbye", "m"), Final(reply()))
