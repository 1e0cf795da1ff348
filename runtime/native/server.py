"""The native API as a service: the ASGI app (``runtime.native.asgi``: the Flask app behind
a2wsgi, the long-poll pop) served by uvicorn, plus the lifecycle sweep.

``NativeService.start(...)`` binds (port 0 picks a free one), serves in a thread and
starts the sweeper; ``stop()`` answers waiting pops, lets uvicorn finish in-flight requests
and joins both. ``horde-chat up`` and the test fixtures use it the same way.
``serve_processes`` is ``horde-chat native --processes N``: uvicorn's multi-process
supervisor, N server processes on one socket, the sweep in the supervisor only.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO

import uvicorn
from sqlalchemy import Engine

from generated.defences import ARRIVING_PER_SOURCE
from generated.errors import HordeError
from generated.routes import ROUTES
from runtime.config import Settings
from runtime.http_guard import Answer, GuardedHttpTools, json_answer
from runtime.listening import BACKLOG, bind
from runtime.native.api.app import create_app
from runtime.native.api.context import NativeContext
from runtime.native.api.errors import error_parts
from runtime.native.asgi import WORKER_LANE_THREADS, NativeASGI
from runtime.native.queue.policy import Policy
from runtime.native.queue.sweep import Sweeper
from runtime.stores.database import (
    autocommit_engine,
    make_engine,
    make_sessionmaker,
    snapshot_sessionmaker,
)
from runtime.stores.objects import open_object_store
from runtime.stores.redis_client import redis_client

START_TIMEOUT = 20.0
GRACEFUL_SHUTDOWN_SECONDS = 10
"""How long a stopping server lets in-flight requests finish (waiting pops answer at once)."""
APP_FACTORY = "runtime.native.asgi:app_from_env"
HTTP_PROTOCOL = "runtime.native.server:NativeHttp"
"""uvicorn's protocol for the native API, by import path (a server process imports it)."""


class NativeHttp(GuardedHttpTools):
    """The native API's connections: the limits on a request's arrival, the requests
    arriving per address, and their refusals in upstream's ``{message, rc}``."""

    arriving_per_source = ARRIVING_PER_SOURCE

    def render(self, error: HordeError) -> Answer:
        status, body, headers = error_parts(error)
        return json_answer(status, body, headers)


def build_context(
    settings: Settings, *, database_url: str, redis_url: str, policy: Policy | None = None
) -> NativeContext:
    engine: Engine = make_engine(database_url)
    settings = Settings(**{**vars(settings), "redis_url": redis_url})
    return NativeContext(
        settings=settings,
        engine=engine,
        # a connection for each of the lane's threads, which use it most (pops, submits)
        autocommit=autocommit_engine(database_url, WORKER_LANE_THREADS),
        sessions=make_sessionmaker(engine),
        snapshots=snapshot_sessionmaker(engine),
        redis=redis_client(redis_url),
        policy=policy or Policy(),
    )


def build_app(
    settings: Settings,
    *,
    database_url: str,
    redis_url: str,
    base_url: str,
    policy: Policy | None = None,
) -> tuple[NativeASGI, NativeContext]:
    """The ASGI app and its context; ``base_url`` is where this API is reached (the object
    store signs download URLs on it)."""
    ctx = build_context(settings, database_url=database_url, redis_url=redis_url, policy=policy)
    try:
        ctx.objects = open_object_store(ctx.settings, base_url=base_url)
    except Exception:
        ctx.close()
        raise
    return NativeASGI(create_app(ctx), redis_url), ctx


def uvicorn_config(app: object, *, log_level: str = "warning", workers: int = 1) -> uvicorn.Config:
    return uvicorn.Config(
        app,  # type: ignore[arg-type]
        factory=isinstance(app, str),
        workers=workers,
        log_level=log_level,
        lifespan="on",
        # the C parser (far cheaper than h11 on a large body: docs/performance.md), with caps
        http=HTTP_PROTOCOL,
        # X-Forwarded-For reaches the app, which trusts it only from a caller presenting
        # the service passkey (runtime.native.api.service_passkey); the client is the peer.
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        backlog=BACKLOG,
    )


def sweeper_for(ctx: NativeContext) -> Sweeper:
    return Sweeper(
        ctx.sessions, ctx.policy, ctx.settings.sweep_seconds, redis=ctx.redis, objects=ctx.objects
    )


@dataclass
class NativeService:
    context: NativeContext
    host: str
    port: int
    app: NativeASGI
    _server: uvicorn.Server
    _thread: threading.Thread
    _sweeper: Sweeper | None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @classmethod
    def start(
        cls,
        settings: Settings,
        *,
        database_url: str,
        redis_url: str,
        policy: Policy | None = None,
        host: str | None = None,
        port: int | None = None,
        sweep: bool = True,
    ) -> NativeService:
        sock = bind(host or settings.native_host, settings.native_port if port is None else port)
        bound_host, bound_port = sock.getsockname()[:2]
        try:
            app, ctx = build_app(
                settings,
                database_url=database_url,
                redis_url=redis_url,
                base_url=f"http://{bound_host}:{bound_port}",
                policy=policy,
            )
        except Exception:
            sock.close()
            raise
        server = uvicorn.Server(uvicorn_config(app))
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="native-uvicorn", daemon=True
        )
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                sock.close()
                ctx.close()
                raise RuntimeError("the native API did not start")
            time.sleep(0.01)
        sweeper = sweeper_for(ctx).start() if sweep else None
        return cls(ctx, bound_host, bound_port, app, server, thread, sweeper)

    def describe(self) -> str:
        dashboard = ROUTES["native_dashboard"].path
        return f"native API: {self.url}/api/v2\ndashboard:  {self.url}{dashboard}"

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.stop()
            self._sweeper = None
        self.app.hub.close_threadsafe()  # waiting pops answer "no job" now
        self._server.should_exit = True
        self._thread.join(timeout=GRACEFUL_SHUTDOWN_SECONDS + 5)
        self.context.close()


def serve_processes(
    settings: Settings,
    *,
    database_url: str,
    redis_url: str,
    host: str,
    port: int,
    processes: int,
    out: TextIO = sys.stdout,
) -> None:
    """uvicorn's supervisor with ``processes`` server processes on one socket, until SIGINT
    or SIGTERM (each server finishes its in-flight requests; waiting pops answer at once).
    The sweep runs here, in the supervisor, once; the servers build their app from the
    environment (``APP_FACTORY``), which is given the bound address."""
    from uvicorn.supervisors import Multiprocess

    from runtime.observability.metrics import multiprocess_dir

    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    os.environ["HORDE_NATIVE_HOST"] = bound_host
    os.environ["HORDE_NATIVE_PORT"] = str(bound_port)
    os.environ["HORDE_DATABASE_URL"] = database_url
    os.environ["HORDE_REDIS_URL"] = redis_url
    ctx = build_context(settings, database_url=database_url, redis_url=redis_url)
    ctx.objects = open_object_store(ctx.settings, base_url=f"http://{bound_host}:{bound_port}")
    sweeper = sweeper_for(ctx).start()
    try:
        where = f"http://{bound_host}:{bound_port}/api/v2"
        print(f"native API: {where} ({processes} processes)", file=out, flush=True)
        config = uvicorn_config(APP_FACTORY, workers=processes)
        with multiprocess_dir():  # the servers' /metrics sum every server's counters
            Multiprocess(config, sockets=[sock]).run()
    finally:
        sweeper.stop()
        sock.close()
        ctx.close()
