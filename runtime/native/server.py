"""The native API as a service: the Flask app served by waitress, plus the lifecycle sweep.

``NativeService.start(...)`` binds (port 0 picks a free one), serves in a thread and
starts the sweeper; ``stop()`` closes the listener and joins both. ``horde-chat up`` and
the test fixtures use it the same way.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from redis import Redis
from sqlalchemy import Engine
from waitress.server import create_server

from runtime.config import Settings
from runtime.native.api.app import create_app
from runtime.native.api.context import NativeContext
from runtime.native.queue.policy import Policy
from runtime.native.queue.sweep import Sweeper
from runtime.stores.database import make_engine, make_sessionmaker
from runtime.stores.objects import open_object_store
from runtime.stores.redis_client import redis_client

WAITRESS_THREADS = 45
# Open connections waitress accepts before it stops accepting: the front's pool to this API
# (runtime.front.app.IN_FLIGHT, 100) plus every worker's and direct client's connections must
# fit, or new connections wait until some pooled idle connection happens to close.
WAITRESS_CONNECTION_LIMIT = 2000


@dataclass
class NativeService:
    context: NativeContext
    host: str
    port: int
    _server: object
    _thread: threading.Thread
    _sweeper: Sweeper | None
    _owned: list[object] = field(default_factory=list)

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
        engine: Engine = make_engine(database_url)
        redis: Redis = redis_client(redis_url)
        settings = Settings(**{**vars(settings), "redis_url": redis_url})
        ctx = NativeContext(
            settings=settings,
            engine=engine,
            sessions=make_sessionmaker(engine),
            redis=redis,
            policy=policy or Policy(),
        )
        app = create_app(ctx)
        server = create_server(
            app,
            host=host or settings.native_host,
            port=settings.native_port if port is None else port,
            threads=WAITRESS_THREADS,
            connection_limit=WAITRESS_CONNECTION_LIMIT,
            # poll(), not select(): select() fails once descriptors pass FD_SETSIZE (1024).
            asyncore_use_poll=True,
            # X-Forwarded-For reaches the app, which trusts it only from a caller presenting
            # the service passkey (runtime.native.api.service_passkey); remote_addr stays the peer.
            clear_untrusted_proxy_headers=False,
        )
        # One host and port give a single-socket server; the union includes MultiSocketServer.
        bound_host, bound_port = server.socket.getsockname()[:2]  # type: ignore[union-attr]
        try:
            ctx.objects = open_object_store(settings, base_url=f"http://{bound_host}:{bound_port}")
        except Exception:
            _shutdown_waitress(server)
            raise
        thread = threading.Thread(target=server.run, name="native-waitress", daemon=True)
        thread.start()
        sweeper = (
            Sweeper(
                ctx.sessions,
                ctx.policy,
                settings.sweep_seconds,
                redis=ctx.redis,
                objects=ctx.objects,
            ).start()
            if sweep
            else None
        )
        return cls(ctx, bound_host, bound_port, server, thread, sweeper)

    def describe(self) -> str:
        return f"native API: {self.url}/api/v2"

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.stop()
            self._sweeper = None
        _shutdown_waitress(self._server)
        self._thread.join(timeout=10)
        self.context.engine.dispose()
        self.context.redis.close()


def _shutdown_waitress(server: Any) -> None:
    """Close every channel of waitress's loop (listener and trigger included) so ``run``
    returns, then stop its task threads (as webtest's StopableWSGIServer does)."""
    while server._map:
        for channel in list(server._map.values()):
            channel.close()
    server.task_dispatcher.shutdown()
