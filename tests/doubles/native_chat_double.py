"""A TEST DOUBLE of the native chat routes, for the front's own logic (not the native API).

The real native API is tested on its own and drives the front's end-to-end tests; this
double lets a front test script what the native side says: a status that never gets a
worker, a fault, a declaration gap, a lost submit response, a lost completion signal. It is
a real HTTP server (Starlette on uvicorn, in a thread, on a free port) and publishes real
signals on a real Redis (``channel_of(request_id)``), so the front's HTTP client, pub/sub
and fallback poll all run for real.

    with NativeChatDouble(redis_url, channel_of) as native:
        native.initial = {"is_possible": False}          # merged into every new status
        native.lose_submit_responses = 1                 # the next submit's answer is lost
        ...  # point a front at native.root
        native.finish(request_id, content="Hi")          # done, generation, signal
        native.finish(request_id, content="Hi", signal=False)  # the poll must find it

Recorded: ``submits`` (headers, body, whether it created a request), ``cancels``,
``status_reads``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import redis
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


@dataclass
class RecordedSubmit:
    headers: dict[str, str]
    body: bytes
    request_id: str
    created: bool


def base_status() -> dict[str, Any]:
    return {
        "finished": 0,
        "processing": 0,
        "restarted": 0,
        "waiting": 1,
        "done": False,
        "faulted": False,
        "wait_time": 0,
        "queue_position": 0,
        "kudos": 0,
        "is_possible": True,
        "generations": [],
        "eligible_threads": 1,
        "charge_basis": "output_estimate",
        "missing_features": [],
        "exceeded_limits": [],
    }


class NativeChatDouble:
    def __init__(self, redis_url: str, channel_of: Callable[[str], str]) -> None:
        self.redis = redis.Redis.from_url(redis_url, decode_responses=True)
        self.channel_of = channel_of
        self.initial: dict[str, Any] = {}
        self.lose_submit_responses = 0
        self.lost_response_delay = 3.0
        self.refusal: tuple[int, str, str] | None = None
        self.models: list[dict[str, Any]] = []
        self.statuses: dict[str, dict[str, Any]] = {}
        self.submits: list[RecordedSubmit] = []
        self.cancels: list[str] = []
        self.status_reads: dict[str, int] = {}
        self._keys: dict[str, str] = {}
        self._lock = threading.Lock()
        app = Starlette(
            routes=[
                Route("/api/v2/generate/chat/async", self._async, methods=["POST"]),
                Route("/api/v2/generate/chat/status/{id}", self._status, methods=["GET"]),
                Route("/api/v2/generate/chat/status/{id}", self._cancel, methods=["DELETE"]),
                Route("/api/v2/status/models", self._models, methods=["GET"]),
            ]
        )
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(1024)
        self.port = self._sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._thread.start()
        while not self._server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: tuple[type[BaseException], BaseException, TracebackType]) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self.redis.close()

    # ------------------------------------------------------------------ scripting
    def update(self, request_id: str, *, signal: bool = True, **fields: Any) -> None:
        with self._lock:
            self.statuses[request_id].update(fields)
        if signal:
            self.redis.publish(self.channel_of(request_id), json.dumps({"id": request_id}))

    def finish(
        self, request_id: str, *, content: str | None = "Hello.", signal: bool = True, **gen: Any
    ) -> None:
        generation = {
            "worker_id": "w1",
            "worker_name": "double",
            "model": "double-model",
            "state": "ok",
            "content": content,
            "tool_calls": [],
            "finish_reason": "stop",
            "kudos": 7.0,
            "charge_basis": "output_estimate",
            "usage": {"prompt_tokens": 11, "completion_tokens": 3, "reasoning_tokens": None},
            **gen,
        }
        self.update(
            request_id, signal=signal, done=True, finished=1, waiting=0, generations=[generation]
        )

    def wait_for_submit(self, count: int = 1, timeout: float = 10) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            created = [s.request_id for s in self.submits if s.created]
            if len(created) >= count:
                return created[count - 1]
            time.sleep(0.01)
        raise AssertionError(f"no submit #{count} within {timeout} s")

    def wait_for_read(self, request_id: str, count: int = 1, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while self.status_reads.get(request_id, 0) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{request_id} was not read {count} times")
            time.sleep(0.01)

    def request_ids(self) -> list[str]:
        """Every request id, oldest first (a snapshot: the server thread adds to them)."""
        with self._lock:
            return list(self.statuses)

    def read_count(self) -> int:
        """How many requests had their status read at least once."""
        with self._lock:
            return len(self.status_reads)

    def wait_for_cancels(self, count: int = 1, timeout: float = 10) -> list[str]:
        deadline = time.monotonic() + timeout
        while len(self.cancels) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return list(self.cancels)

    # ------------------------------------------------------------------ routes
    async def _async(self, request: Request) -> JSONResponse:
        body = await request.body()
        if self.refusal is not None:
            status, rc, message = self.refusal
            return JSONResponse({"message": message, "rc": rc}, status_code=status)
        key = request.headers.get("x-operation-key", "")
        with self._lock:
            created = key not in self._keys
            if created:
                self._keys[key] = f"req{len(self._keys) + 1}"
                self.statuses[self._keys[key]] = {**base_status(), **self.initial}
            request_id = self._keys[key]
            self.submits.append(RecordedSubmit(dict(request.headers), body, request_id, created))
            lose = self.lose_submit_responses > 0
            self.lose_submit_responses -= int(lose)
        if lose:
            await asyncio.sleep(self.lost_response_delay)
        return JSONResponse({"id": request_id, "kudos": 7.0}, status_code=202)

    async def _status(self, request: Request) -> JSONResponse:
        request_id = request.path_params["id"]
        with self._lock:
            status = self.statuses.get(request_id)
            self.status_reads[request_id] = self.status_reads.get(request_id, 0) + 1
        if status is None:
            return JSONResponse({"message": "not found", "rc": "RequestNotFound"}, 404)
        return JSONResponse(status)

    async def _cancel(self, request: Request) -> JSONResponse:
        request_id = request.path_params["id"]
        self.cancels.append(request_id)
        self.update(request_id, signal=False, waiting=0)
        return JSONResponse(self.statuses[request_id])

    async def _models(self, request: Request) -> JSONResponse:
        return JSONResponse(self.models)
