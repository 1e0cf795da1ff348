"""A tiny TCP proxy that loses chosen HTTP responses, to test lost-response recovery.

    with DroppingProxy(upstream_port, drop=b"POST /api/v2/generate/chat/async", times=1) as p:
        ...  # send to p.url: the first matching request reaches upstream, its answer is lost

Every request is checked, the later ones on a kept-alive connection too (a client such as
the worker's httpx client sends its pops, posts and submits on one connection): a request
that starts with ``drop`` (while ``times`` lasts) is forwarded upstream; the upstream's
answer is discarded and both sides are closed, so the client sees its connection reset
after the server acted, the "lost response" case. Everything else is piped both ways.
``dropped`` counts the lost answers.

Without ``drop`` nothing is lost. ``requests`` keeps every request's bytes (request line,
headers and body) in arrival order, ``sent(prefix)`` those that start with ``prefix``, and
``split(request)`` parts one into its headers (lowercased names) and body.
``on_request(data)``, when given, runs on each request's first read before it is forwarded,
in the proxy's thread: a test changes the world there (a worker re-declaring, say) before
the native API reads the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Self


class DroppingProxy:
    def __init__(
        self,
        upstream_port: int,
        *,
        drop: bytes | None = None,
        times: int = 1,
        on_request: Callable[[bytes], None] | None = None,
    ) -> None:
        self.upstream_port = upstream_port
        self.drop = drop
        self.times = times
        self.on_request = on_request
        self.dropped = 0
        self.requests: list[bytes] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._relay(client_r, client_w)
        finally:
            self._connections.discard(task)
            client_w.transport.abort()

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        losing = asyncio.Event()  # a request to drop went upstream: its answer is lost

        async def requests() -> None:
            with contextlib.suppress(ConnectionError, OSError):
                index: int | None = None  # this connection's request being read
                while data := await client_r.read(65536):
                    if _starts_request(data):
                        index = len(self.requests)
                        self.requests.append(data)
                        if self.on_request is not None:
                            self.on_request(data)
                    elif index is not None:  # the rest of its body
                        self.requests[index] += data
                    if self.drop and data.startswith(self.drop) and self.dropped < self.times:
                        self.dropped += 1
                        losing.set()
                    up_w.write(data)
                    await up_w.drain()
            if not losing.is_set():  # the client is done: so is the upstream connection
                with contextlib.suppress(ConnectionError, OSError):
                    up_w.close()

        async def answers() -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await up_r.read(65536):
                    if losing.is_set():  # HTTP/1.1 without pipelining: this answers it
                        return
                    client_w.write(data)
                    await client_w.drain()

        forward = asyncio.create_task(requests())
        try:
            await answers()
        finally:
            forward.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await forward
            up_w.transport.abort()

    async def _close(self) -> None:
        """Stop listening and cut every open connection (nothing left to the loop's close)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    def sent(self, prefix: bytes) -> list[bytes]:
        """The requests that start with ``prefix`` (e.g. b"POST /api/v2/generate/chat/async")."""
        return [data for data in list(self.requests) if data.startswith(prefix)]

    def __enter__(self) -> Self:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


def split(request: bytes) -> tuple[dict[str, str], bytes]:
    """(headers with lowercased names, body) of one recorded request."""
    head, _, body = request.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")[1:]
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers, body


_METHODS = (b"GET ", b"POST ", b"PUT ", b"PATCH ", b"DELETE ", b"HEAD ", b"OPTIONS ")


def _starts_request(data: bytes) -> bool:
    return data.startswith(_METHODS) and b" HTTP/1." in data.split(b"\r\n", 1)[0]
