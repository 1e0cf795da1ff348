"""A tiny TCP proxy that loses chosen HTTP responses, to test lost-response recovery.

    with DroppingProxy(upstream_port, drop=b"POST /api/v2/generate/chat/async", times=1) as p:
        ...  # send to p.url: the first matching request reaches upstream, its answer is lost

A connection whose request starts with ``drop`` (while ``times`` lasts) is forwarded
upstream whole; the upstream's answer is read and discarded and both sides are closed, so
the client sees its connection reset after the server acted, the "lost response" case.
Everything else is piped both ways. ``dropped`` counts the lost answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType
from typing import Self


class DroppingProxy:
    def __init__(self, upstream_port: int, *, drop: bytes, times: int = 1) -> None:
        self.upstream_port = upstream_port
        self.drop = drop
        self.times = times
        self.dropped = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._server: asyncio.Server | None = None

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

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        first = await client_r.read(65536)
        if first.startswith(self.drop) and self.dropped < self.times:
            self.dropped += 1
            up_w.write(first)
            await up_w.drain()
            upstream = asyncio.create_task(self._pipe(client_r, up_w))
            with contextlib.suppress(ConnectionError, OSError, TimeoutError):
                await asyncio.wait_for(up_r.read(65536), 30)  # the answer, lost
            upstream.cancel()
            client_w.transport.abort()
            up_w.close()
            return
        up_w.write(first)
        await asyncio.gather(self._pipe(client_r, up_w), self._pipe(up_r, client_w))

    def __enter__(self) -> Self:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
