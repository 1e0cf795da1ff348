"""The front's Starlette application: routes, shared state, lifespan.

``create_front_app`` builds the app; its lifespan opens one ``aiohttp.ClientSession`` to the
native API, one Redis pool and the signal hub, and closes them. ``FrontState``
(``app.state.front``) is what handlers share; it keeps native cancels' background tasks so a
cancel outlives the request that asked for it. Every response carries ``x-request-id``
(the SDKs' ``_request_id``): the horde request id once submitted, else the front's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from generated.errors import HordeError, ModelNotFound
from generated.routes import ROUTES
from generated.signals import CHAT_SIGNALS
from generated.wire.front import Model, ModelList
from runtime.front.admission import PARSER, PARSER_SLOTS, Admission, api_key_of
from runtime.front.chat import ChatDialect, ChatRequestRoute
from runtime.front.config import FrontConfig
from runtime.front.drain import Drain
from runtime.front.errors import error_response, method_not_allowed, not_found, unexpected
from runtime.front.fair_share import FairShare
from runtime.front.native_client import NativeClient, native_session
from runtime.front.observe import OPERATOR_ROUTES, ObserveMiddleware, current_request_id
from runtime.front.playground import PLAYGROUND_ROUTES
from runtime.front.reference import REFERENCE_ROUTES
from runtime.front.responses_api.route import ResponsesDialect
from runtime.front.signals import SignalHub
from runtime.front.waiter import cancel_until_confirmed
from runtime.observability.metrics import process_exited

OWNER = "horde"
IN_FLIGHT = 100
"""Native calls in flight at once (and the HTTP pool's size)."""
CANCEL_INLINE_WAIT = 5.0
"""Seconds an error answer waits for its request's cancel to be confirmed."""


@dataclass
class FrontState:
    config: FrontConfig
    native: NativeClient
    hub: SignalHub
    admission: Admission
    redis: Redis
    drain: Drain
    started: int = field(default_factory=lambda: int(time.time()))
    cancels: set[asyncio.Task[Any]] = field(default_factory=set)
    parse_share: FairShare = field(default_factory=lambda: FairShare(PARSER_SLOTS))
    """Turns at the parser processes, shared fairly between client addresses."""

    def cancel_later(self, request_id: str, source: str | None = None) -> asyncio.Task[bool]:
        """Cancel on the native side, repeated until confirmed, in a task that outlives the
        caller's."""
        task = asyncio.create_task(cancel_until_confirmed(self.native, request_id, source))
        self.cancels.add(task)
        task.add_done_callback(self.cancels.discard)
        return task

    async def cancel(self, request_id: str, source: str | None = None) -> None:
        """Cancel before answering: waits for the confirmation up to the read timeout, and
        the repeats go on in the background if it has not come by then."""
        await asyncio.wait({self.cancel_later(request_id, source)}, timeout=CANCEL_INLINE_WAIT)


async def list_models(request: Request) -> Response:
    state: FrontState = request.app.state.front
    try:
        api_key_of(request)
        active = await state.native.models()
    except HordeError as error:
        return error_response(error)
    names = sorted({str(m["name"]) for m in active if m.get("chat_count")})
    listed: ModelList = {"object": "list", "data": [_model(name, state.started) for name in names]}
    return JSONResponse(listed)


async def retrieve_model(request: Request) -> Response:
    """OpenAI's retrieve model: one model online chat workers serve, else 404
    model_not_found."""
    state: FrontState = request.app.state.front
    name = str(request.path_params["model"])
    try:
        api_key_of(request)
        active = await state.native.models()
        if not any(str(m["name"]) == name and m.get("chat_count") for m in active):
            raise ModelNotFound(model=name)
    except HordeError as error:
        return error_response(error)
    return JSONResponse(_model(name, state.started))


def _model(name: str, created: int) -> Model:
    return {"id": name, "object": "model", "created": created, "owned_by": OWNER}


def _front_path(operation_id: str) -> str:
    return ROUTES[operation_id].path


def create_front_app(
    config: FrontConfig, channel_of: Callable[[str], str] = CHAT_SIGNALS.channel
) -> Starlette:
    drain = Drain(config.shutdown_grace)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        drain.bind(asyncio.get_running_loop())
        restore_signals = drain.chain_signals()  # a server process: SIGTERM begins the drain
        # Large bodies are parsed in processes of their own, started in the background: their
        # server imports the front's modules, seconds on a busy machine, which the front's
        # start (and small bodies) need not wait for; a large body meanwhile waits for them.
        parsers_started = asyncio.create_task(asyncio.to_thread(PARSER.open))
        async with native_session(IN_FLIGHT) as http:
            redis = Redis.from_url(config.redis_url, decode_responses=True)
            hub = SignalHub(redis, channel_of)
            await hub.start()
            native = NativeClient(
                http,
                config.native_roots,
                passkey=config.service_passkey,
                client_agent=config.client_agent,
                submit_attempts=config.submit_attempts,
                submit_patience=config.submit_patience,
                submit_timeout=config.submit_timeout,
                read_timeout=config.read_timeout,
                max_in_flight=IN_FLIGHT,
                request_id=current_request_id,  # the native access log names our request id
            )
            admission = Admission(config.per_source_cap, config.global_cap)
            state = FrontState(config, native, hub, admission, redis, drain)
            app.state.front = state
            try:
                yield
            finally:
                if state.cancels:
                    await asyncio.wait(set(state.cancels), timeout=5)
                await hub.stop()
                await redis.aclose()
                restore_signals()
                await parsers_started
                await asyncio.to_thread(PARSER.close)
                process_exited()

    routes = [
        Route(_front_path("chat_completions"), ChatRequestRoute(ChatDialect), methods=["POST"]),
        Route(_front_path("create_response"), ChatRequestRoute(ResponsesDialect), methods=["POST"]),
        Route(_front_path("list_models"), list_models, methods=["GET"]),
        # a model name may hold a slash (upstream's backend/model): the rest of the path
        Route(
            _front_path("retrieve_model").replace("{model}", "{model:path}"),
            retrieve_model,
            methods=["GET"],
        ),
        *OPERATOR_ROUTES,  # /healthz, /readyz, /metrics
        *REFERENCE_ROUTES,  # /openapi.json, /docs
        *PLAYGROUND_ROUTES,  # /, /pages/{asset}
    ]
    handlers: dict[Any, Any] = {
        404: not_found,
        405: method_not_allowed,
        Exception: unexpected,
    }
    middleware = [Middleware(ObserveMiddleware, routes=routes)]  # request ids too
    app = Starlette(
        routes=routes, lifespan=lifespan, exception_handlers=handlers, middleware=middleware
    )
    app.state.drain = drain  # FrontService.stop() begins it from its thread
    return app
