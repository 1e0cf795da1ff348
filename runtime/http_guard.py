"""uvicorn's httptools protocol with the limits production servers put on a request's arrival.

uvicorn sets no limit on a request's head, so ``GuardedHttpTools`` caps its bytes and header
lines (431 ``HeadersTooLarge``), gives it a deadline (408 ``RequestTimeout``), and may cap
the requests one address has arriving at once (429 ``TooManyConnections``), all before the
app sees the request. A refused connection gets its answer, then is drained briefly and
closed, so the client reads the answer instead of a reset.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from generated.defences import HEAD_DEADLINE_SECONDS, MAX_HEADER_BYTES, MAX_HEADER_COUNT
from generated.errors import HeadersTooLarge, HordeError, RequestTimeout, TooManyConnections

LINGER_SECONDS = 2.0
"""How long a refused connection's further bytes are read and dropped before it is closed."""
LINGER_BYTES = 1024 * 1024
"""A refused connection that sends more than this meanwhile is closed at once."""

Answer = tuple[int, list[tuple[str, str]], bytes]
"""A refusal as a service renders it: status, headers, JSON body."""


class GuardedHttpTools(HttpToolsProtocol):
    """The protocol of one connection; a service subclasses it to render its refusals.

    The head's caps are about nginx's and Apache's. Its deadline runs from the connection,
    or from the first byte after an earlier request. A request counts as arriving from its
    first byte to its last: one being served, however long, and an idle connection count
    for nothing."""

    max_header_bytes: ClassVar[int] = MAX_HEADER_BYTES
    max_header_count: ClassVar[int] = MAX_HEADER_COUNT
    head_deadline: ClassVar[float] = HEAD_DEADLINE_SECONDS
    arriving_per_source: ClassVar[int | None] = None
    """Requests one address may have arriving at once (None: any number)."""
    arriving: ClassVar[Counter[str]]
    """This process's requests arriving now on connections of this protocol, by address."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.arriving = Counter()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # until a request's head is whole
        self._head_bytes = 0  # received while the head was incomplete
        self._head_size = 0  # of the head's URL and header lines, as parsed
        self._header_count = 0
        self._arriving: str | None = None  # the address this connection's request counts on
        self._head_timer: asyncio.TimerHandle | None = None
        self._refusal: HordeError | None = None
        self._dropped = 0
        self._linger: asyncio.TimerHandle | None = None

    def render(self, error: HordeError) -> Answer:
        raise NotImplementedError

    # ---------------------------------------------------------------- the connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._arrived()
        for timer in (self._head_timer, self._linger):
            if timer is not None:
                timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:  # refused: what follows is read and dropped
            self._dropped += len(data)
            if self._dropped > LINGER_BYTES:
                self.transport.close()
            return
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        refusal = self._due_refusal()
        if refusal is not None:
            self._refuse(refusal)

    def _due_refusal(self) -> HordeError | None:
        """What the bytes fed so far are refused for (a callback's finding, or a head still
        incomplete past the byte cap), if anything."""
        if self._refusal is None and self._in_head and self._head_bytes > self.max_header_bytes:
            self._refusal = HeadersTooLarge(detail=f"more than {self.max_header_bytes} bytes")
        return self._refusal

    # ---------------------------------------------------------------- the parser's callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_timer is None:  # a request after an earlier one: from its first byte
            self._start_head_timer()
        cap = self.arriving_per_source
        if cap is None or self._refusal is not None:
            return
        source = self.client[0] if self.client else ""
        if self.arriving[source] >= cap:
            self._refusal = TooManyConnections(count=self.arriving[source])
            return
        self.arriving[source] += 1
        self._arriving = source

    def on_url(self, url: bytes) -> None:
        self._head_size += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._head_size += len(name) + len(value) + 4
        if self._header_count > self.max_header_count:
            if self._refusal is None:
                limit = self.max_header_count
                self._refusal = HeadersTooLarge(detail=f"more than {limit} header lines")
            return
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refusal is None and self._head_size > self.max_header_bytes:
            self._refusal = HeadersTooLarge(detail=f"more than {self.max_header_bytes} bytes")
        if self._refusal is not None:
            return  # no request reaches the app
        self._in_head = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self._refusal is None:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refusal is not None:
            return
        super().on_message_complete()
        self._arrived()
        self._in_head, self._head_bytes, self._head_size, self._header_count = True, 0, 0, 0

    # ---------------------------------------------------------------- arrival

    def _start_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.head_deadline, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        if self._in_head and self._refusal is None and not self.transport.is_closing():
            self._refuse(RequestTimeout(part="head", seconds=self.head_deadline))

    def _arrived(self) -> None:
        """The request counted on its address arrived whole (or its connection is gone)."""
        if self._arriving is None:
            return
        left = self.arriving[self._arriving] - 1
        if left > 0:
            self.arriving[self._arriving] = left
        else:
            del self.arriving[self._arriving]
        self._arriving = None

    # ---------------------------------------------------------------- the refusal

    def _refuse(self, error: HordeError) -> None:
        """Answer ``error`` and close: the write side at once, the connection after the
        linger (or once the client closes it)."""
        self._refusal = error
        self._arrived()
        status, headers, body = self.render(error)
        head = [STATUS_LINE[status]]
        for name, value in [
            *headers,
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
            ("connection", "close"),
        ]:
            head.append(f"{name}: {value}\r\n".encode("latin-1"))
        self.transport.write(b"".join(head) + b"\r\n" + body)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._linger = self.loop.call_later(LINGER_SECONDS, self.transport.close)


def json_answer(status: int, payload: Any, headers: list[tuple[str, str]]) -> Answer:
    return status, headers, json.dumps(payload, separators=(",", ":")).encode()
