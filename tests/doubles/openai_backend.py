"""A TEST DOUBLE for a third-party LLM backend: not a model, not llama.cpp.

:class:`OpenAIBackendDouble` is a real HTTP server (Starlette on uvicorn, in a thread, on a
free port) that speaks the OpenAI chat-completions protocol the way llama.cpp's server, vLLM,
koboldcpp or Ollama do, so the chat worker can be tested against every mapping, error and
timeout without a model. What it answers is scripted per test; what it received is recorded.

    with OpenAIBackendDouble(model="tiny") as backend:
        backend.script(Reply(content="Hello there"))
        backend.script(Failure(status=503))
        backend.script(Hang())
        ...  # point the worker at backend.openai_base_url
        assert backend.chat_requests()[0].body["temperature"] == 1

Routes: ``GET /v1/models``, ``POST /v1/chat/completions`` (JSON, or SSE when ``stream`` is
true, with a usage chunk when ``stream_options.include_usage`` is set and ``stream_usage``
is on), and ``POST /extras/tokenize/count`` when ``tokenize_route`` is on. A route answers
its scripted items in order; with none left, the chat route answers ``default_reply`` (or a
500 naming the problem when there is none) and the others answer normally.

Token counts: the double "tokenizes" with ``counter`` (default one token per UTF-8 byte) over
its ChatML rendering of the messages; ``usage.prompt_tokens`` is that plus
``prompt_tokens_offset``, so a test can make a worker's counter exact, short or long.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import defaultdict, deque
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Self

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.doubles.backend_script import (
    Completion,
    Failure,
    Hang,
    RecordedRequest,
    Reply,
    Scripted,
    TokenCounter,
    count_bytes,
    render_chatml,
    sse,
)

CHAT_ROUTE = "/v1/chat/completions"
MODELS_ROUTE = "/v1/models"
COUNT_ROUTE = "/extras/tokenize/count"
_POLL_SECONDS = 0.02


class OpenAIBackendDouble:
    """A scripted OpenAI-compatible backend on ``127.0.0.1:<free port>``."""

    def __init__(
        self,
        *,
        model: str = "double-model",
        model_fields: dict[str, Any] | None = None,
        default_reply: Reply | None = None,
        counter: TokenCounter = count_bytes,
        prompt_tokens_offset: int = 0,
        tokenize_route: bool = True,
        stream_usage: bool = True,
        strict_model: bool = False,
    ) -> None:
        self.model = model
        self.model_fields = dict(model_fields or {})
        self.default_reply = default_reply
        self.counter = counter
        self.prompt_tokens_offset = prompt_tokens_offset
        self.tokenize_route = tokenize_route
        self.stream_usage = stream_usage
        self.strict_model = strict_model
        self.requests: list[RecordedRequest] = []
        self._scripts: dict[str, deque[Scripted]] = defaultdict(deque)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._socket: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    # -- scripting and inspection ------------------------------------------------------

    def script(self, *items: Scripted, route: str = CHAT_ROUTE) -> None:
        """Queue answers for the next requests to ``route``, in order."""
        with self._lock:
            self._scripts[route].extend(items)

    def pending(self, route: str = CHAT_ROUTE) -> int:
        with self._lock:
            return len(self._scripts[route])

    def chat_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == CHAT_ROUTE]

    def prompt_tokens_for(self, messages: list[dict[str, Any]]) -> int:
        return self.counter(render_chatml(messages)) + self.prompt_tokens_offset

    @property
    def base_url(self) -> str:
        if self._socket is None:
            raise RuntimeError("the backend double is not started")
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> Self:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        config = uvicorn.Config(
            self._app(),
            log_level="warning",
            lifespan="off",
            ws="none",
            http="h11",
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        sockets = [self._socket]
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": sockets}, daemon=True
        )
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the backend double's server thread died while starting")
            self._closing.wait(0.01)
        return self

    def close(self) -> None:
        self._closing.set()  # releases Hang and slow replies
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- the HTTP side -------------------------------------------------------------------

    def _app(self) -> Starlette:
        return Starlette(
            routes=[
                Route(MODELS_ROUTE, self._models, methods=["GET"]),
                Route(CHAT_ROUTE, self._chat, methods=["POST"]),
                Route(COUNT_ROUTE, self._count, methods=["POST"]),
            ]
        )

    async def _record(self, request: Request) -> Any:
        raw = await request.body()
        try:
            body: Any = await request.json() if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with self._lock:
            self.requests.append(
                RecordedRequest(request.method, request.url.path, dict(request.headers), body)
            )
        return body

    def _next(self, route: str) -> Scripted | None:
        with self._lock:
            queue = self._scripts[route]
            return queue.popleft() if queue else None

    async def _sleep(self, seconds: float) -> None:
        """Sleep without blocking the loop, cut short when the double closes."""
        deadline = asyncio.get_running_loop().time() + seconds
        while not self._closing.is_set():
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            await asyncio.sleep(min(left, _POLL_SECONDS))

    async def _unscripted(self, item: Scripted | None) -> Response | None:
        """Answer a Failure or a Hang; None means the route answers normally."""
        if isinstance(item, Hang):
            while not self._closing.is_set():
                await asyncio.sleep(_POLL_SECONDS)
            return Response(status_code=503)
        if isinstance(item, Failure):
            await self._sleep(item.delay)
            return JSONResponse(item.payload(), item.status, headers=item.headers)
        return None

    async def _models(self, request: Request) -> Response:
        await self._record(request)
        item = self._next(MODELS_ROUTE)
        failure = await self._unscripted(item)
        if failure is not None:
            return failure
        entry = {"id": self.model, "object": "model", "owned_by": "double", **self.model_fields}
        return JSONResponse({"object": "list", "data": [entry]})

    async def _count(self, request: Request) -> Response:
        body = await self._record(request)
        if not self.tokenize_route:
            return JSONResponse({"detail": "Not Found"}, 404)
        failure = await self._unscripted(self._next(COUNT_ROUTE))
        if failure is not None:
            return failure
        if not isinstance(body, dict) or not isinstance(body.get("input"), str):
            return JSONResponse({"error": {"message": "input must be a string"}}, 422)
        return JSONResponse({"count": self.counter(body["input"])})

    async def _chat(self, request: Request) -> Response:
        body = await self._record(request)
        item = self._next(CHAT_ROUTE) or self.default_reply
        if item is None:
            return JSONResponse({"error": {"message": "the double has no scripted reply"}}, 500)
        failure = await self._unscripted(item)
        if failure is not None:
            return failure
        assert isinstance(item, Reply)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return JSONResponse({"error": {"message": "messages must be a list"}}, 400)
        requested_model = body.get("model") or self.model
        if self.strict_model and requested_model != self.model:
            return JSONResponse({"error": {"message": f"model {requested_model} not found"}}, 404)
        completion = Completion(
            reply=item,
            model=self.model,
            prompt_tokens=item.prompt_tokens
            if item.prompt_tokens is not None
            else self.prompt_tokens_for(body["messages"]),
            completion_tokens=item.completion_tokens
            if item.completion_tokens is not None
            else self.counter((item.reasoning_content or "") + (item.content or "")),
        )
        await self._sleep(item.delay)
        if not body.get("stream"):
            return JSONResponse(completion.body())
        options = body.get("stream_options") or {}
        include_usage = self.stream_usage and bool(options.get("include_usage"))
        return StreamingResponse(
            self._stream(completion, include_usage), media_type="text/event-stream"
        )

    async def _stream(self, completion: Completion, include_usage: bool) -> AsyncIterator[bytes]:
        for event in completion.events(include_usage):
            yield sse(event)
            await self._sleep(completion.reply.chunk_delay)
        yield sse("[DONE]")
