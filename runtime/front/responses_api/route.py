"""POST /v1/responses: OpenAI's Responses API, as the chat request of the same conversation.

``ResponsesDialect`` is the route's ``runtime.front.chat.Dialect``: the body's translation
(``request.checked_and_encoded``, off the event loop when large, as a chat body's check), the
Response object of the reply (``reply.finished``) and the Responses stream
(``events.ResponseEvents``). Everything between (admission, the submit and its operation key,
the wait, the relay of progress, cancels, errors in OpenAI's envelope) is the chat route's.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from generated.errors import HordeError
from runtime.front.admission import ParserTurn, admitted_body
from runtime.front.chat import Streamed
from runtime.front.responses import Reply
from runtime.front.responses_api.events import ResponseEvents
from runtime.front.responses_api.reply import finished
from runtime.front.responses_api.request import checked_and_encoded


class ResponsesDialect:
    """One Responses request: it keeps what its Response repeats of the body, and its
    stream's events once one opened."""

    def __init__(self) -> None:
        self.echo: dict[str, Any] = {}
        self.created = int(time.time())
        self.events: ResponseEvents | None = None

    async def admit(self, raw: bytes, turn: ParserTurn) -> tuple[bytes, dict[str, Any]]:
        body, request, self.echo = await admitted_body(raw, checked_and_encoded, turn)
        return body, request

    def answer(self, reply: Reply, request: dict[str, Any]) -> Mapping[str, Any]:
        return finished(reply, request, self.echo, self.created, int(time.time()))

    def stream(self, streamed: Streamed) -> AsyncIterator[bytes]:
        self.events = ResponseEvents(
            streamed.request_id, streamed.request, self.echo, streamed.model
        )
        return self.events.stream(streamed.events)

    def failure(self, error: HordeError) -> bytes:
        assert self.events is not None  # a failure after the headers: the stream opened
        return self.events.failure(error)
