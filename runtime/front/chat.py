"""POST /v1/chat/completions and /v1/responses: one coroutine owns the request's whole life.

Admitted -> Submitted -> Waiting -> Answered (docs/design.md, "The front"). One coroutine
keeps the admission slot and signal subscription until a stream's last byte, and one
watcher notices a client that left, cancelling the wait and the Horde request. Errors
before a stream are HTTP errors in OpenAI's envelope (x-should-retry: false once submitted);
after its headers, one error event. A route is a ``Dialect`` on this life: how its body
becomes a chat request and how the reply and a late error are written (``ChatDialect``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from generated.chat.names import PARAM_STREAM
from generated.errors import HordeError, InternalError
from runtime.front.admission import (
    ClientGone,
    ParserTurn,
    admitted_body,
    api_key_of,
    checked_and_encoded,
    read_body,
)
from runtime.front.drain import Drain
from runtime.front.errors import error_event, error_response
from runtime.front.native_client import SubmitLost, new_operation_key
from runtime.front.request_id import RequestId
from runtime.front.responses import Reply, completion
from runtime.front.sse import DONE, SSE_HEADERS, ReplyEvents, chunk_stream, encode
from runtime.front.stream_events import keep_alive, queue_note, reply_events, stream_model
from runtime.front.waiter import ReplyWait, needs_cancel

if TYPE_CHECKING:
    from runtime.front.app import FrontState

log = logging.getLogger(__name__)
T = TypeVar("T")


class DisconnectWatch:
    """Listens for http.disconnect once the body was read, and for the end of a stopping
    front's shutdown grace (``drain``).

    ``run(work)`` awaits ``work`` in the caller's own task and cancels that task when the
    client leaves or the grace ends (turning the cancel into ClientGone or
    front_shutting_down): no task for the work nor for each of the two ends, which an open
    wait held (three tasks, their memory and their scheduling at every run)."""

    __slots__ = ("_interrupted", "_task", "_working", "drain", "gone")

    def __init__(self, receive: Receive, drain: Drain | None = None) -> None:
        self.gone = False
        self.drain = drain
        self._working: asyncio.Task[Any] | None = None
        self._interrupted = False
        self._task = asyncio.create_task(self._listen(receive))

    async def _listen(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.gone = True
                self._interrupt()
                return

    def _interrupt(self) -> None:
        """The client left or the grace ended: cancel the work under way, once."""
        if self._working is not None and not self._interrupted:
            self._interrupted = True
            self._working.cancel()

    def _ended(self) -> HordeError | ClientGone:
        """Why the work was cut: the grace's end (the client still there), else the client."""
        if self.drain is not None and self.drain.over.is_set() and not self.gone:
            return self.drain.expired()
        return ClientGone()

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        """``work``'s result, or ClientGone (``work`` cancelled) if the client leaves first,
        or front_shutting_down (``work`` cancelled) if the shutdown grace ends first."""
        if self.gone or (self.drain is not None and self.drain.over.is_set()):
            work.close()
            raise self._ended()
        current = asyncio.current_task()
        assert current is not None
        self._working, self._interrupted = current, False
        if self.drain is not None:
            self.drain.at_end(self._interrupt)
        try:
            result = await work
        except BaseException:
            if not self._interrupted:
                raise
        finally:
            self._working = None
            if self.drain is not None:
                self.drain.forget(self._interrupt)
        if self._interrupted:
            current.uncancel()  # the cancel was ours, turned into the error below
            raise self._ended() from None
        return result

    def close(self) -> None:
        self._task.cancel()


@dataclass(frozen=True)
class Streamed:
    """A streamed request's reply events (``runtime.front.sse``), with what its events name:
    the request id, the normalised request, and the model known so far (``model()``)."""

    events: ReplyEvents
    request_id: str
    request: dict[str, Any]
    model: Callable[[], str]


class Dialect(Protocol):
    """What a route speaks over the chat request life, for one request."""

    async def admit(self, raw: bytes, turn: ParserTurn) -> tuple[bytes, dict[str, Any]]:
        """(the chat body to forward, encoded; the normalised chat request), or the refusal;
        a large body is parsed at ``turn``."""
        ...

    def answer(self, reply: Reply, request: dict[str, Any]) -> Mapping[str, Any]:
        """The JSON body of the finished request."""
        ...

    def stream(self, streamed: Streamed) -> AsyncIterator[bytes]:
        """The encoded events of a streamed request, its end included."""
        ...

    def failure(self, error: HordeError) -> bytes:
        """What ends a stream whose headers went out."""
        ...


class ChatDialect:
    """OpenAI's chat completions: chat.completion, or its chunks and [DONE]."""

    async def admit(self, raw: bytes, turn: ParserTurn) -> tuple[bytes, dict[str, Any]]:
        return await admitted_body(raw, checked_and_encoded, turn)  # off the event loop when large

    def answer(self, reply: Reply, request: dict[str, Any]) -> Mapping[str, Any]:
        return completion(reply, request)

    async def stream(self, streamed: Streamed) -> AsyncIterator[bytes]:
        chunks = chunk_stream(streamed.events, streamed.request_id, streamed.request)
        async for chunk in chunks:
            yield encode(chunk)
        yield DONE

    def failure(self, error: HordeError) -> bytes:
        return encode(error_event(error)) + DONE


class ChatRequestRoute:
    """The ASGI endpoint of a route served as one chat request, in the ``Dialect`` that
    ``dialect()`` makes for each request; the shared FrontState is the app's
    ``state.front``."""

    def __init__(self, dialect: Callable[[], Dialect]) -> None:
        self.dialect = dialect

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state: FrontState = scope["app"].state.front
        request = Request(scope, receive)
        source = request.client.host if request.client else "unknown"
        life = _Life(state, request, send, source, self.dialect())
        try:
            with state.admission.admit(source):
                await life.run()
        except ClientGone:
            log.info("client %s left", source)
        except HordeError as error:
            await life.fail(error)
        except Exception:
            log.exception("%s %s failed", request.method, request.url.path)
            await life.fail(InternalError())


def stream_model_of(wait: ReplyWait, request: dict[str, Any]) -> str:
    """The model a stream names before its reply: from the wait's last status read."""
    return stream_model(wait.status, request)


class _Life:
    """One request's run; knows whether it was submitted and whether headers went out."""

    def __init__(
        self, state: FrontState, request: Request, send: Send, source: str, dialect: Dialect
    ) -> None:
        self.state = state
        self.request = request
        self.send = send
        self.source = source
        self.dialect = dialect
        self.submitted = False
        self.headers_sent = False

    async def fail(self, error: HordeError) -> None:
        if self.headers_sent:
            await self._event(self.dialect.failure(error), more=False)
            return
        response = error_response(error, submitted=self.submitted)
        await response(self.request.scope, self.request.receive, self.send)

    async def run(self) -> None:
        config = self.state.config
        self.state.drain.refuse_if_started()
        raw = await read_body(self.request, config.max_body_bytes, config.body_timeout)
        api_key = api_key_of(self.request)
        body, normalised = await self.dialect.admit(
            raw, functools.partial(self.state.parse_share.turn, self.source)
        )
        self.state.drain.refuse_if_started()  # a stopping front submits nothing new
        operation_key = new_operation_key()
        since = self.state.hub.mark()  # what the hub hears from here on reaches the wait
        try:
            accepted = await self.state.native.submit(
                body, api_key=api_key, operation_key=operation_key, source=self.source
            )
        except SubmitLost as lost:
            if lost.maybe_queued:  # the Horde may hold an orphan: cancel it by its key
                await self.state.native.cancel_operation(
                    operation_key, api_key=api_key, source=self.source
                )
            # a client retry would be a new request (and a second horde tax) all the same
            self.submitted = lost.maybe_queued
            raise
        self.submitted = True
        request_id, first = accepted.request_id, accepted.status
        # the wait holds no more than it reads: thousands are open at once, and the raw and
        # forwarded bodies are as large as the client's messages
        del raw, body, accepted
        named = RequestId.of(self.request.scope)
        if named is not None:  # every response from here on names the horde request
            named.submitted(request_id)
        watch = DisconnectWatch(self.request.receive, self.state.drain)
        try:
            async with ReplyWait(
                self.state.native,
                self.state.hub,
                request_id,
                normalised,
                config.budget,
                source=self.source,
                since=since,
            ) as wait:
                try:
                    await watch.run(wait.open(first))  # the submit's status
                    first = None  # the wait keeps what it reads of it
                    if normalised.get(PARAM_STREAM):
                        await watch.run(self._stream(wait, request_id, normalised))
                    else:
                        reply = await watch.run(wait.reply())
                        await self._json(self.dialect.answer(reply, normalised))
                except HordeError as exc:
                    if needs_cancel(exc):  # before the answer, whose message says so
                        await self.state.cancel(request_id, self.source)
                    raise
                except BaseException:  # the client left, or the server stops
                    self.state.cancel_later(request_id, self.source)
                    raise
        finally:
            watch.close()

    async def _stream(self, wait: ReplyWait, request_id: str, request: dict[str, Any]) -> None:
        await self.send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        self.headers_sent = True
        events = reply_events(self.state.redis, wait, request_id, request)
        model = functools.partial(stream_model_of, wait, request)
        data = self.dialect.stream(Streamed(events, request_id, request, model))
        interval = self.state.config.keepalive_interval
        async for item in keep_alive(data, interval, lambda: queue_note(wait.status)):
            await self._event(item)
        await self._event(b"", more=False)

    async def _event(self, data: bytes, *, more: bool = True) -> None:
        await self.send({"type": "http.response.body", "body": data, "more_body": more})

    async def _json(self, payload: Mapping[str, Any]) -> None:
        response = JSONResponse(payload)
        await response(self.request.scope, self.request.receive, self.send)
