"""Reasoning is split the same way in progress and in the final reply
(docs/design.md, "Streaming"): the worker's streamed pieces, joined, are exactly
the content and reasoning of the reply it submits, however the backend chunks a
``<think>`` block, so the front's relay is always extended by the final reply, channel by
channel; and the front sends reasoning as ``reasoning_content`` deltas, content as
``content`` deltas, none of the reasoning under ``include_reasoning: false``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from generated.errors import StreamDiverged
from runtime.front.progress_stream import Post, split_evenly
from runtime.front.responses import Reply
from runtime.front.sse import Delta, Final, ReplyEvents, chunk_stream
from runtime.worker.reply import (
    StreamAccumulator,
    ThinkSplitter,
    parse_chat_completion,
    split_reasoning,
)
from tests.support.openai_schema import assert_chunk

CONTENTS = [
    "<think>plan it</think>\n\nThe answer",
    "  <think>\n all thought, cut off  ",
    "no think block",
    "<think></think>x",
    "<think>a </thi b</think>  c </think> d",
    "<thinking>not a block",
    "<thi",
    "   ",
    "",
    "<think>  \n  </think>  \n",
    "\n<think>\nStep one.\nStep two.\n</think>\n\nThe answer is 4.",
]


def _chunked(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(c, len(text)) for c in cuts})
    pieces, start = [], 0
    for point in [*points, len(text)]:
        pieces.append(text[start:point])
        start = point
    return pieces


def _stream(pieces: list[str]) -> tuple[list[tuple[str, str]], Any]:
    """What the worker would post for each chunk, and the reply it would submit."""
    folded = StreamAccumulator()
    posted = []
    for piece in pieces:
        added = folded.add_parts({"choices": [{"delta": {"content": piece}}]})
        posted.append((added.content, added.reasoning))
    folded.add_parts({"choices": [{"delta": {}, "finish_reason": "stop"}]})
    return posted, parse_chat_completion(folded.completion(), split_think=False)


@pytest.mark.parametrize("content", CONTENTS)
def test_one_splitter_serves_the_progress_and_the_final_reply(content: str) -> None:
    whole = split_reasoning(content)
    reply = parse_chat_completion(
        {"choices": [{"message": {"content": content}, "finish_reason": "stop"}]}
    )
    for size in range(1, max(len(content), 1) + 1):
        pieces = [content[i : i + size] for i in range(0, len(content), size)] or [""]
        posted, streamed = _stream(pieces)
        relayed_content = "".join(c for c, _ in posted)
        relayed_reasoning = "".join(r for _, r in posted)
        assert (streamed.content or "").startswith(relayed_content), (size, posted)
        assert (streamed.reasoning_content or "").startswith(relayed_reasoning), (size, posted)
        assert (streamed.content, streamed.reasoning_content) == (
            reply.content or None,  # a stream folds an empty content to None, as before
            reply.reasoning_content,
        ), size
    if not content.lstrip().startswith("<think>"):
        assert whole == (content, None)  # no think block: the content unchanged


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet="<>/thinkab \n", max_size=40),
    st.lists(st.integers(min_value=0, max_value=40), max_size=8),
)
def test_any_chunking_of_any_content_splits_as_the_whole_does(
    content: str, cuts: list[int]
) -> None:
    posted, streamed = _stream(_chunked(content, cuts))
    expected = parse_chat_completion(
        {"choices": [{"message": {"content": content}, "finish_reason": "stop"}]}
    )
    assert (streamed.content, streamed.reasoning_content) == (
        expected.content or None,
        expected.reasoning_content,
    )
    assert (streamed.content or "").startswith("".join(c for c, _ in posted))
    assert (streamed.reasoning_content or "").startswith("".join(r for _, r in posted))


def test_a_think_block_streams_its_reasoning_before_the_answer_exists() -> None:
    posted, _ = _stream(["<think>", "Let me", " think. ", "</think>", "\n\nHi", " there"])
    assert posted[1] == ("", "Let me")  # reasoning goes out while it is generated
    assert posted[2] == ("", " think.")  # its trailing space held until more comes
    assert [c for c, _ in posted] == ["", "", "", "", "Hi", " there"]


def test_a_reasoning_field_keeps_the_content_whole() -> None:
    folded = StreamAccumulator()
    folded.add_parts({"choices": [{"delta": {"reasoning_content": "hm"}}]})
    added = folded.add_parts({"choices": [{"delta": {"content": "<think>x</think>y"}}]})
    assert (added.content, added.reasoning) == ("<think>x</think>y", "")
    splitter = ThinkSplitter()
    assert splitter.feed("  <th").content == ""  # undecided: held
    assert splitter.plain().content == "  <th"


def test_pacing_cuts_a_post_reasoning_first() -> None:
    post = Post("abcd", "efgh")
    pieces = split_evenly(post, 3)
    assert pieces == [Post("abc", ""), Post("d", "ef"), Post("", "gh")]
    assert pieces[0] + pieces[1] + pieces[2] == post


def _reply(content: str | None, reasoning: str | None) -> Reply:
    return Reply("r1", "m", content, reasoning, [], "stop")


def _chunks(request: dict[str, Any], *items: Delta | Final) -> list[dict[str, Any]]:
    async def events() -> ReplyEvents:
        for item in items:
            yield item

    async def run() -> list[dict[str, Any]]:
        return [dict(c) async for c in chunk_stream(events(), "r1", request)]

    chunks = asyncio.run(run())
    for chunk in chunks:
        assert_chunk(chunk)
    return chunks


def _deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c["choices"][0]["delta"] for c in chunks if c["choices"]]


def test_relayed_reasoning_goes_out_as_reasoning_content_then_the_content() -> None:
    request = {"stream": True}
    chunks = _chunks(
        request,
        Delta("", "m", "Thinking"),
        Delta("", "m", " hard"),
        Delta("The", "m", ""),
        Final(_reply("The answer.", "Thinking hard.")),
    )
    deltas = _deltas(chunks)
    assert deltas[:4] == [
        {"role": "assistant", "content": ""},
        {"reasoning_content": "Thinking"},
        {"reasoning_content": " hard"},
        {"content": "The"},
    ]
    assert deltas[4] == {"content": " answer.", "reasoning_content": "."}
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_include_reasoning_false_sends_no_reasoning_in_the_stream() -> None:
    request = {"stream": True, "horde": {"include_reasoning": False}}
    chunks = _chunks(
        request,
        Delta("", "m", "Thinking"),
        Delta("The", "m", ""),
        Final(_reply("The answer.", "Thinking.")),
    )
    assert all("reasoning_content" not in d for d in _deltas(chunks))
    assert "".join(d.get("content") or "" for d in _deltas(chunks)) == "The answer."


def test_a_final_reasoning_that_does_not_extend_the_relayed_one_diverges() -> None:
    with pytest.raises(StreamDiverged):
        _chunks({"stream": True}, Delta("", "m", "Plan A"), Final(_reply("x", "Plan B")))
    with pytest.raises(StreamDiverged):
        _chunks({"stream": True}, Delta("", "m", "Plan A"), Final(_reply("x", None)))
