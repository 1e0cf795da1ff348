"""The front as a service: uvicorn (one event loop) in a thread, on a socket we bind.

``FrontService.start`` binds first (port 0 picks a free one), serves in a thread and
returns once the lifespan started; ``stop()`` begins the drain (``runtime.front.drain``),
asks uvicorn to exit and joins. ``up``, the tests and the bench use it alike.
``serve_processes`` is ``horde-chat front --processes N``: the parent binds the socket, opens
the shared metrics directory and runs uvicorn's supervisor with N server processes, each
building its app from ``config``. Both configure uvicorn through ``uvicorn_config``.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

import uvicorn
from starlette.types import ASGIApp
from uvicorn.supervisors.multiprocess import Multiprocess

from generated.errors import HordeError, InternalError
from generated.routes import ROUTES
from generated.signals import CHAT_SIGNALS
from runtime.front.app import create_front_app
from runtime.front.config import FrontConfig
from runtime.front.drain import Drain, server_timeout
from runtime.http_guard import Answer, GuardedHttpTools, json_answer
from runtime.listening import BACKLOG, bind
from runtime.observability.metrics import multiprocess_dir
from runtime.service_process import settled_after_startup

START_TIMEOUT = 20.0
HTTP_PROTOCOL = "runtime.front.server:FrontHttp"
"""uvicorn's protocol for the front, by import path (a server process imports it)."""


class FrontHttp(GuardedHttpTools):
    """The front's connections: the limits on a request's head, their refusals in OpenAI's
    envelope. Not capped per address: behind a proxy every client's connection is the
    proxy's (the per-source caps count requests, on the address X-Forwarded-For names)."""

    def render(self, error: HordeError) -> Answer:
        status = error.front_status or InternalError.front_status or 500
        return json_answer(status, error.openai_body(), list(error.front_headers().items()))


def uvicorn_config(app: Any, config: FrontConfig, **options: Any) -> uvicorn.Config:
    """uvicorn's settings for the front, one process or several: the graceful timeout
    outlasts the shutdown grace (the drain answers every submitted request first)."""
    options.setdefault("log_level", "warning")
    return uvicorn.Config(
        app,
        lifespan="on",
        # the C parser (far cheaper than h11 on a large body: docs/performance.md), with caps
        http=HTTP_PROTOCOL,
        timeout_graceful_shutdown=int(server_timeout(config.shutdown_grace) + 0.999),
        backlog=BACKLOG,
        **config.proxy_options(),  # X-Forwarded-For from configured proxies only
        **options,
    )


@dataclass
class FrontService:
    host: str
    port: int
    server: uvicorn.Server
    thread: threading.Thread
    drain: Drain

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @classmethod
    def start(
        cls,
        config: FrontConfig,
        channel_of: Callable[[str], str] = CHAT_SIGNALS.channel,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
    ) -> FrontService:
        sock = bind(host, port)
        app = create_front_app(config, channel_of)
        server = uvicorn.Server(uvicorn_config(app, config, log_level=log_level))
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="front-uvicorn", daemon=True
        )
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                sock.close()
                raise RuntimeError("the chat front did not start")
            time.sleep(0.01)
        bound_host, bound_port = sock.getsockname()[:2]
        return cls(bound_host, bound_port, server, thread, app.state.drain)

    def describe(self) -> str:
        playground = ROUTES["front_playground"].path
        return f"chat front: {self.url}/v1\nplayground: {self.url}{playground}"

    def stop(self) -> None:
        self.drain.begin_threadsafe()
        self.server.should_exit = True
        self.thread.join(timeout=server_timeout(self.drain.grace) + 5)


def settled_front_app(config: FrontConfig) -> ASGIApp:
    """A server process's app under ``serve_processes``: its heap settled once it started
    (``runtime.service_process``)."""
    return settled_after_startup(create_front_app(config))


def serve_processes(
    config: FrontConfig,
    *,
    host: str,
    port: int,
    processes: int,
    out: TextIO,
    log_level: str = "warning",
) -> int:
    """``horde-chat front --processes N``: N uvicorn server processes on one socket until
    SIGTERM or SIGINT reaches this parent (uvicorn's supervisor passes SIGTERM on to each
    and waits for them; one that dies is replaced)."""
    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    with multiprocess_dir():
        factory = functools.partial(settled_front_app, config)
        uv_config = uvicorn_config(
            factory, config, factory=True, workers=processes, log_level=log_level
        )
        supervisor = Multiprocess(uv_config, sockets=[sock])
        print(
            f"chat front: http://{bound_host}:{bound_port}/v1 ({processes} processes)",
            file=out,
            flush=True,
        )
        try:
            supervisor.run()
        finally:
            sock.close()
    return 0
