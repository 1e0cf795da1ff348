"""The front as a service: uvicorn (one event loop) in a thread, on a socket we bind.

``FrontService.start(config, channel_of, host=..., port=0)`` binds first (port 0 picks a
free one), serves in a thread and returns once the app's lifespan has started;
``stop()`` asks uvicorn to exit and joins the thread. ``horde-chat up``, the tests and the
bench use it the same way.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import uvicorn

from generated.signals import chat_channel
from runtime.front.app import create_front_app
from runtime.front.config import FrontConfig

START_TIMEOUT = 20.0


@dataclass
class FrontService:
    host: str
    port: int
    server: uvicorn.Server
    thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @classmethod
    def start(
        cls,
        config: FrontConfig,
        channel_of: Callable[[str], str] = chat_channel,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
    ) -> FrontService:
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted sockets only then
        # (without it, Nagle and delayed ACKs add ~40 ms to every response).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(4096)
        app = create_front_app(config, channel_of)
        uv_config = uvicorn.Config(
            app,
            log_level=log_level,
            lifespan="on",
            timeout_graceful_shutdown=5,
            backlog=4096,
            **config.proxy_options(),  # X-Forwarded-For from configured proxies only
        )
        server = uvicorn.Server(uv_config)
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
        return cls(bound_host, bound_port, server, thread)

    def describe(self) -> str:
        return f"chat front: {self.url}/v1"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
