"""The front's operator surface: ``/healthz``, ``/readyz``, ``/metrics`` and the access log.

``ObserveMiddleware`` gives each request its id (``x-request-id``), times it to its last
chunk, counts it and writes its access-log line; the front's own id goes with every native
call, so the native access log names it. Counters live in one registry a process
(``REGISTRY``), summed over processes under ``--processes N``. The front resolves no users,
so its lines name none.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from generated.errors import NotReady
from generated.routes import ROUTES
from runtime.front.errors import error_response
from runtime.front.request_id import RequestId, naming_the_request
from runtime.observability.access_log import AccessLog
from runtime.observability.metrics import CONTENT_TYPE, UNMATCHED, HttpMetrics, exposition

REGISTRY = CollectorRegistry()
HTTP = HttpMetrics(REGISTRY)
OPEN_WAITS = Gauge(
    "horde_front_open_waits",
    "Submitted requests being waited on.",
    registry=REGISTRY,
    multiprocess_mode="livesum",  # with several processes: the front's total
)
OPEN_STREAMS = Gauge(
    "horde_front_open_streams",
    "Server-sent event streams open to clients.",
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
WAKES = Counter(
    "horde_front_wait_wakes",
    "Times a wait woke to read its status: on the Redis signal or on the fallback poll.",
    ["by"],
    registry=REGISTRY,
)
WAKE_SIGNAL = "signal"
WAKE_POLL = "poll"

CURRENT: ContextVar[str | None] = ContextVar("horde_front_request_id", default=None)
"""The id the front made for the request being served (before any horde request id)."""


def current_request_id() -> str | None:
    """The id the front made for the request being served: every native call of a front
    request carries it (its access line names it as ``origin_id`` once the response names
    the horde request id instead)."""
    return CURRENT.get()


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    state = getattr(request.app.state, "front", None)
    problems: list[str] = []
    if state is None:
        problems.append("starting")
    else:
        try:
            await state.redis.ping()
        except (RedisError, OSError) as exc:
            problems.append(f"redis unreachable: {type(exc).__name__}: {exc}"[:300])
    if problems:
        return error_response(NotReady(problems="; ".join(problems)))
    return JSONResponse({"status": "ready"})


async def metrics(request: Request) -> Response:
    HTTP.gc.flush()  # the pauses noted since this process's last request
    return Response(exposition(REGISTRY), headers={"content-type": CONTENT_TYPE})


OPERATOR_ROUTES: list[BaseRoute] = [
    Route(ROUTES[op].path, view, methods=[ROUTES[op].method])
    for op, view in (
        ("front_healthz", healthz),
        ("front_readyz", readyz),
        ("front_metrics", metrics),
    )
]
"""spec/api/front.yaml's operator routes (at the server's root)."""


class ObserveMiddleware:
    """Counts, times and logs every HTTP request of the wrapped app.

    The log line names the ``x-request-id`` the response named and, once that is the horde
    request id, the front's own id as ``origin_id``; the front's own id stays in ``CURRENT``
    for the native client (``current_request_id``). Counted: requests by route and status
    with latency, open waits and streams, and how waits woke (signal or fallback poll)."""

    def __init__(
        self,
        app: ASGIApp,
        routes: list[BaseRoute] | None = None,
        access_log: AccessLog | None = None,
    ) -> None:
        self.app = app
        self.log = access_log or AccessLog("front")
        self.paths: dict[Any, str] = {}
        for route in routes or []:
            if isinstance(route, Route):
                self.paths[route.endpoint] = route.path

    def _template(self, scope: Scope) -> str:
        return self.paths.get(scope.get("endpoint"), UNMATCHED)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One layer for the request id and the observation (they were two middlewares: a
        coroutine frame and a send wrapper more per request, held by every open wait)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = RequestId()
        scope[RequestId.SCOPE_KEY] = request_id
        made = request_id.value
        CURRENT.set(made)
        status = 500
        streaming = False

        async def observed_send(message: Message) -> None:
            nonlocal status, streaming
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = dict(message.get("headers", []))
                if headers.get(b"content-type", b"").startswith(b"text/event-stream"):
                    streaming = True
                    OPEN_STREAMS.inc()
                message = naming_the_request(message, request_id)
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            if streaming:
                OPEN_STREAMS.dec()
            seconds = time.perf_counter() - started
            route = self._template(scope)
            HTTP.observe(scope["method"], route, status, seconds)
            self.log.emit(
                method=scope["method"],
                route=route,
                status=status,
                latency_ms=seconds * 1000,
                request_id=request_id.value,
                user_id=None,
                origin_id=made if made != request_id.value else None,
            )
