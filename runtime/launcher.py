"""``horde-chat up``: the stores, the schema, then every service, until SIGINT or SIGTERM.

Services are started in ``SERVICE_STARTERS`` order and stopped in reverse; each is an
object with ``describe() -> str`` and ``stop()``. The chat front (port 7002) and a worker
join ``up`` by adding a starter here.
"""

from __future__ import annotations

import secrets
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol, TextIO

from runtime.config import Settings
from runtime.native.db.migrate import upgrade
from runtime.stores.embedded import EmbeddedStores


class Service(Protocol):
    def describe(self) -> str: ...

    def stop(self) -> None: ...


ServiceStarter = Callable[[Settings, EmbeddedStores], Service]


def start_native(settings: Settings, stores: EmbeddedStores) -> Service:
    from runtime.native.server import NativeService

    return NativeService.start(
        settings, database_url=stores.database_url, redis_url=stores.redis_url
    )


def start_front(settings: Settings, stores: EmbeddedStores) -> Service:
    from runtime.front.config import FrontConfig
    from runtime.front.server import FrontService

    native_root = f"http://{settings.native_host}:{settings.native_port}"
    config = FrontConfig.from_env(stores.redis_url, default_root=native_root)
    config = replace(config, service_passkey=settings.service_passkey)
    return FrontService.start(config, host=settings.front_host, port=settings.front_port)


def start_demo_worker(settings: Settings, stores: EmbeddedStores) -> Service:
    from runtime.worker.demo import DemoWorkerService

    return DemoWorkerService.start(settings, stores)


SERVICE_STARTERS: list[ServiceStarter] = [start_native, start_front, start_demo_worker]


def run_up(
    settings: Settings,
    *,
    out: TextIO = sys.stdout,
    stop_event: threading.Event | None = None,
    starters: list[ServiceStarter] | None = None,
) -> int:
    """Run in the foreground until a signal (or ``stop_event``); leave nothing running."""
    stop = stop_event or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if settings.service_passkey is None:  # the front and the native API of this run share one
        settings = replace(settings, service_passkey=secrets.token_urlsafe(24))
    services: list[Service] = []
    with EmbeddedStores.start(settings) as stores:
        try:
            for line in stores.describe():
                print(line, file=out, flush=True)
            upgrade(stores.database_url)
            print("schema: up to date", file=out, flush=True)
            for starter in starters or SERVICE_STARTERS:
                service = starter(settings, stores)
                services.append(service)
                print(service.describe(), file=out, flush=True)
            print("ready; Ctrl-C stops everything", file=out, flush=True)
            stop.wait()
        finally:
            for service in reversed(services):
                service.stop()
            print("stopped", file=out, flush=True)
    return 0
