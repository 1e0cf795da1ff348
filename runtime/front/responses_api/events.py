"""A streamed Response: OpenAI's Responses events, numbered, as server-sent events.

``ResponseEvents.stream`` reads the reply events a streamed chat completion reads and sends
response.created and response.in_progress at once, then per output item its added, delta and
done events, and last response.completed (or response.incomplete) with the whole Response.
Reasoning is relayed until the content begins; a final reply that does not extend what was
relayed ends with 502 stream_diverged, as a chat stream. ``failure`` is the one error event
after the headers. Events carry sequence_number from 0; there is no [DONE].
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from generated.errors import HordeError
from generated.wire.front import ResponseOutputItem
from runtime.front.responses import Reply, shows_reasoning
from runtime.front.responses_api.reply import (
    finished,
    message_item,
    reasoning_item,
    started,
    status_of,
)
from runtime.front.sse import Delta, ReplyEvents, rest_of

TEXT_PART = {"message": "output_text", "reasoning": "reasoning_text"}
"""An item kind that streams text -> the type of its one content part."""
TEXT_EVENT = {"message": "response.output_text", "reasoning": "response.reasoning_text"}
"""An item kind that streams text -> the prefix of its delta and done events."""


@dataclass
class _Open:
    """A text item (reasoning or message) opened in the stream."""

    kind: str
    index: int
    item_id: str
    text: str = ""
    done: bool = False


def _part(kind: str, text: str) -> dict[str, Any]:
    part: dict[str, Any] = {"type": TEXT_PART[kind], "text": text}
    if kind == "message":
        part.update(annotations=[], logprobs=[])
    return part


class ResponseEvents:
    """The events of one streamed Response."""

    def __init__(
        self,
        request_id: str,
        request: dict[str, Any],
        echo: dict[str, Any],
        model: Callable[[], str],
    ) -> None:
        self.request_id = request_id
        self.request = request
        self.echo = echo
        self.model = model
        self.created = int(time.time())
        self.sequence = 0
        self.with_reasoning = shows_reasoning(request)
        self.items: dict[str, _Open] = {}
        """The text items opened so far, by kind."""

    def _event(self, event: dict[str, Any]) -> bytes:
        event["sequence_number"] = self.sequence
        self.sequence += 1
        data = json.dumps(event, separators=(",", ":"))
        return f"event: {event['type']}\ndata: {data}\n\n".encode()

    def failure(self, error: HordeError) -> bytes:
        """The error event that ends a stream whose headers went out."""
        return self._event(
            {"type": "error", "code": error.code, "message": error.message, "param": error.param}
        )

    async def stream(self, events: ReplyEvents) -> AsyncIterator[bytes]:
        shell = started(self.request_id, self.model(), self.echo, self.created)
        yield self._event({"type": "response.created", "response": shell})
        yield self._event({"type": "response.in_progress", "response": shell})
        async for event in events:
            if isinstance(event, Delta):
                for data in self._delta(event):
                    yield data
                continue
            for data in self._final(event.reply):
                yield data
            return

    # ------------------------------------------------------------------ text items

    def _open(self, kind: str, index: int | None = None) -> Iterator[bytes]:
        """Opens the text item of ``kind`` (at ``index``, else after those open), if it is
        not open yet: its added events."""
        if kind in self.items:
            return
        made = message_item if kind == "message" else reasoning_item
        blank: dict[str, Any] = {**made(self.request_id, "", "in_progress"), "content": []}
        item = _Open(kind, len(self.items) if index is None else index, blank["id"])
        self.items[kind] = item
        yield self._event(
            {"type": "response.output_item.added", "output_index": item.index, "item": blank}
        )
        yield self._event(
            {"type": "response.content_part.added", **self._where(item), "part": _part(kind, "")}
        )

    def _where(self, item: _Open) -> dict[str, Any]:
        return {"item_id": item.item_id, "output_index": item.index, "content_index": 0}

    def _text(self, kind: str, delta: str) -> Iterator[bytes]:
        """``delta`` added to the open text item of ``kind``."""
        item = self.items[kind]
        item.text += delta
        event = {"type": f"{TEXT_EVENT[kind]}.delta", **self._where(item), "delta": delta}
        if kind == "message":
            event["logprobs"] = []
        yield self._event(event)

    def _close(self, kind: str, done_item: ResponseOutputItem) -> Iterator[bytes]:
        """The done events of the text item of ``kind``, whose last state is ``done_item``."""
        item = self.items[kind]
        item.done = True
        text: str = done_item["content"][0]["text"]  # type: ignore[typeddict-item]
        done = {"type": f"{TEXT_EVENT[kind]}.done", **self._where(item), "text": text}
        if kind == "message":
            done["logprobs"] = []
        yield self._event(done)
        yield self._event(
            {"type": "response.content_part.done", **self._where(item), "part": _part(kind, text)}
        )
        yield self._event(
            {"type": "response.output_item.done", "output_index": item.index, "item": done_item}
        )

    def _delta(self, event: Delta) -> Iterator[bytes]:
        if event.reasoning and self.with_reasoning and "message" not in self.items:
            yield from self._open("reasoning")
            yield from self._text("reasoning", event.reasoning)
        if event.text:
            reasoning = self.items.get("reasoning")
            if reasoning is not None and not reasoning.done:  # the content begins
                done = reasoning_item(self.request_id, reasoning.text, "completed")
                yield from self._close("reasoning", done)
            yield from self._open("message")
            yield from self._text("message", event.text)

    # ------------------------------------------------------------------ the end

    def _final(self, reply: Reply) -> Iterator[bytes]:
        message = self.items.get("message")
        reasoning = self.items.get("reasoning")
        rest_of(  # a reply that diverges from the relayed text ends the stream here
            reply,
            message.text if message is not None else "",
            (reasoning.text if reasoning is not None else "") if self.with_reasoning else None,
        )
        response = finished(
            reply,
            self.request,
            self.echo,
            self.created,
            int(time.time()),
            reasoning_first=reasoning is not None or message is None,
        )
        for index, item in enumerate(response["output"]):
            if item["type"] in TEXT_PART:
                yield from self._text_item(index, item)
            else:
                yield from self._call_item(index, item)
        status, _ = status_of(reply)
        yield self._event({"type": f"response.{status}", "response": response})

    def _text_item(self, index: int, item: ResponseOutputItem) -> Iterator[bytes]:
        """What is left to send of a final reasoning or message item."""
        kind = item["type"]
        opened = self.items.get(kind)
        if opened is not None and opened.done:
            return
        text: str = item["content"][0]["text"]  # type: ignore[typeddict-item]
        relayed = opened.text if opened is not None else ""
        yield from self._open(kind, index)
        if len(text) > len(relayed):
            yield from self._text(kind, text[len(relayed) :])
        yield from self._close(kind, item)

    def _call_item(self, index: int, item: ResponseOutputItem) -> Iterator[bytes]:
        """A function call's events: added, its arguments whole, done."""
        blank = {**item, "arguments": "", "status": "in_progress"}
        yield self._event(
            {"type": "response.output_item.added", "output_index": index, "item": blank}
        )
        where = {"item_id": item["id"], "output_index": index}
        arguments: str = item["arguments"]  # type: ignore[typeddict-item]
        yield self._event(
            {"type": "response.function_call_arguments.delta", **where, "delta": arguments}
        )
        yield self._event(
            {
                "type": "response.function_call_arguments.done",
                **where,
                "name": item["name"],  # type: ignore[typeddict-item]
                "arguments": arguments,
            }
        )
        yield self._event(
            {"type": "response.output_item.done", "output_index": index, "item": item}
        )
