"""``horde-chat up``: the stores, the schema, then every service, until SIGINT or SIGTERM.

Services are started in ``SERVICE_STARTERS`` order (the native API, the chat front, the
demo worker) and stopped in reverse; each is an object with ``describe() -> str`` and
``stop()``, and another service joins ``up`` by adding a starter here. The launcher also
creates the demo worker's user (its key kept in ``<data dir>/demo-worker.key``): it holds
the database URL, and the worker package talks to the horde only through the native API.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from generated.errors import InvalidAPIKey
from runtime.config import Settings
from runtime.listening import PortInUse
from runtime.native.accounts.keys import create_user, user_for_key
from runtime.native.db.migrate import upgrade
from runtime.service_process import Service, serve_until, settle
from runtime.stop_signals import stop_on_signals
from runtime.stores.database import make_engine, make_sessionmaker, transaction
from runtime.stores.embedded import EmbeddedStores

if TYPE_CHECKING:
    from runtime.front.config import FrontConfig

DEMO_USER = "demo-worker"
DEMO_KEY_FILE = "demo-worker.key"


ServiceStarter = Callable[[Settings, EmbeddedStores], Service]


def start_native(settings: Settings, stores: EmbeddedStores) -> Service:
    from runtime.native.server import NativeService

    return NativeService.start(
        settings, database_url=stores.database_url, redis_url=stores.redis_url
    )


def _native_root(settings: Settings) -> str:
    return f"http://{settings.native_host}:{settings.native_port}"


def front_config(
    redis_url: str, env: Mapping[str, str] | None = None, *, default_root: str | None = None
) -> FrontConfig:
    """The front's settings from the environment; a bad one is a refusal, like a taken port."""
    from runtime.front.config import FrontConfig

    try:
        return FrontConfig.from_env(redis_url, env, default_root=default_root)
    except ValueError as bad:
        raise Refused(str(bad)) from bad


def start_front(settings: Settings, stores: EmbeddedStores) -> Service:
    from runtime.front.server import FrontService

    config = front_config(stores.redis_url, default_root=_native_root(settings))
    config = replace(config, service_passkey=settings.service_passkey)
    return FrontService.start(config, host=settings.front_host, port=settings.front_port)


def demo_worker_key(database_url: str, key_file: Path) -> str:
    """The demo worker user's API key: the kept one while it still names a user, else new."""
    engine = make_engine(database_url, pool_size=1)
    try:
        sessions = make_sessionmaker(engine)
        if key_file.exists():
            kept = key_file.read_text().strip()
            try:
                with transaction(sessions) as session:
                    user_for_key(session, kept)
                return kept
            except InvalidAPIKey:
                pass  # the database was reset: make a new user
        with transaction(sessions) as session:
            _, api_key = create_user(session, DEMO_USER)
    finally:
        engine.dispose()
    key_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(api_key + "\n")
    return api_key


def start_demo_worker(settings: Settings, stores: EmbeddedStores) -> Service:
    from runtime.worker.demo import DemoWorkerService

    api_key = demo_worker_key(stores.database_url, settings.data_dir / DEMO_KEY_FILE)
    return DemoWorkerService.start(settings, api_key)


SERVICE_STARTERS: list[ServiceStarter] = [start_native, start_front, start_demo_worker]


def join_line(stores: EmbeddedStores) -> str:
    """How a second service (``horde-chat native``/``front``) joins these stores."""
    return f"join:     HORDE_DATABASE_URL={stores.database_url} HORDE_REDIS_URL={stores.redis_url}"


class Refused(Exception):
    """A service will not start: the message says why (its stores, its schema, a port taken,
    a data folder another ``up`` holds)."""


def run_up(
    settings: Settings,
    *,
    out: TextIO = sys.stdout,
    stop_event: threading.Event | None = None,
    starters: list[ServiceStarter] | None = None,
) -> int:
    """Run in the foreground until a signal (or ``stop_event``); leave nothing running, also
    when the terminal closes (SIGHUP, unless ignored). Refused while another ``up`` runs on
    the same data folder, or when a port is taken."""
    # The front's settings are read when it starts, after the stores and the native API: a
    # bad one is refused here, before anything starts.
    front_config("", default_root=_native_root(settings))
    with stop_on_signals(stop_event or threading.Event()) as stop:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        with data_folder_held(settings.data_dir):
            try:
                return _run_stack(settings, stop, out, starters)
            except PortInUse as taken:
                ports = {
                    settings.native_port: "HORDE_NATIVE_PORT",
                    settings.front_port: "HORDE_FRONT_PORT",
                }
                setting = ports.get(taken.port, "HORDE_NATIVE_PORT or HORDE_FRONT_PORT")
                raise _port_refused(taken, setting) from taken


def _port_refused(taken: PortInUse, setting: str) -> Refused:
    """The one-line refusal for a taken port, naming the setting that moves the service."""
    return Refused(f"{taken}; {setting} picks another port")


def _run_stack(
    settings: Settings, stop: threading.Event, out: TextIO, starters: list[ServiceStarter] | None
) -> int:
    """``up``'s stores and services, serving until ``stop``; everything stopped after."""
    if settings.service_passkey is None:  # the front and the native API of this run share one
        settings = replace(settings, service_passkey=secrets.token_urlsafe(24))
    services: list[Service] = []
    with EmbeddedStores.start(settings) as stores:
        try:
            for line in stores.describe():
                print(line, file=out, flush=True)
            print(join_line(stores), file=out, flush=True)
            upgrade(stores.database_url)
            print("schema: up to date", file=out, flush=True)
            for starter in SERVICE_STARTERS if starters is None else starters:
                service = starter(settings, stores)
                services.append(service)
                print(service.describe(), file=out, flush=True)
            if services:  # what they built lives as long as they do (runtime.service_process)
                settle()
            print("ready; Ctrl-C stops everything", file=out, flush=True)
            stop.wait()
        finally:
            for service in reversed(services):
                service.stop()
            print("stopped", file=out, flush=True)
    return 0


DATA_FOLDER_LOCK = "up.lock"


@contextlib.contextmanager
def data_folder_held(data_dir: Path) -> Iterator[None]:
    """Hold ``data_dir`` for this ``up`` alone, or refuse naming the ``up`` that holds it.

    Two ``up``s on one folder share its embedded stores' files: a second one started its own
    redis-server on the first's socket path and, refused its ports, stopped it and removed the
    socket, and the first lost Redis for every new connection (2026-12-05). The lock is an
    exclusive flock on ``DATA_FOLDER_LOCK`` in the folder, which the kernel drops when the
    process ends, killed or not; the file names the holder's pid."""
    fd = os.open(data_dir / DATA_FOLDER_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise Refused(
            f"another horde-chat up (pid {holder}) is using {data_dir}: stop it, or set "
            "HORDE_DATA_DIR to another folder"
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)  # the lock goes with it


def _required(value: str | None, name: str, service: str) -> str:
    if not value:
        raise Refused(f"{name} is required: horde-chat {service} runs against configured stores")
    return value


def run_migrate(settings: Settings, *, revision: str = "head", out: TextIO = sys.stdout) -> int:
    """``horde-chat migrate``: the schema of HORDE_DATABASE_URL upgraded to ``revision``
    (several hosts at once take turns on the migrations' advisory lock)."""
    from sqlalchemy.exc import SQLAlchemyError

    database_url = _required(settings.database_url, "HORDE_DATABASE_URL", "migrate")
    try:
        upgrade(database_url, revision)
    except SQLAlchemyError as exc:
        raise Refused(f"postgres unreachable: {type(exc).__name__}: {exc}".splitlines()[0]) from exc
    print(f"schema: at {revision}", file=out, flush=True)
    return 0


def run_native(
    settings: Settings,
    *,
    host: str | None = None,
    port: int | None = None,
    processes: int = 1,
    out: TextIO = sys.stdout,
    stop_event: threading.Event | None = None,
) -> int:
    """``horde-chat native``: the native API alone on HORDE_DATABASE_URL / HORDE_REDIS_URL,
    refused while Postgres or Redis is unreachable or the schema is behind; with
    ``processes`` > 1, that many server processes on one port (uvicorn's supervisor), the
    sweep in the supervisor."""
    from runtime.native.readiness import problems
    from runtime.native.server import NativeService, serve_processes
    from runtime.stores.redis_client import redis_client

    database_url = _required(settings.database_url, "HORDE_DATABASE_URL", "native")
    redis_url = _required(settings.redis_url, "HORDE_REDIS_URL", "native")
    engine = make_engine(database_url, pool_size=1)
    redis = redis_client(redis_url)
    try:
        found = problems(engine, redis)
    finally:
        engine.dispose()
        redis.close()
    if found:
        raise Refused("; ".join(found))
    try:
        if processes > 1:
            serve_processes(
                settings,
                database_url=database_url,
                redis_url=redis_url,
                host=host or settings.native_host,
                port=settings.native_port if port is None else port,
                processes=processes,
                out=out,
            )
            return 0
        with stop_on_signals(stop_event or threading.Event()) as stop:
            service = NativeService.start(
                settings, database_url=database_url, redis_url=redis_url, host=host, port=port
            )
            return serve_until(stop, service, out)
    except PortInUse as taken:
        raise _port_refused(taken, "--port or HORDE_NATIVE_PORT") from taken


def run_front(
    settings: Settings,
    *,
    host: str | None = None,
    port: int | None = None,
    native_roots: str | None = None,
    processes: int = 1,
    out: TextIO = sys.stdout,
    stop_event: threading.Event | None = None,
) -> int:
    """``horde-chat front``: the chat front alone on HORDE_REDIS_URL, refused while Redis is
    unreachable; its native roots from ``--native-roots`` or HORDE_FRONT_NATIVE_ROOTS; with
    ``processes`` > 1, that many server processes on one port (uvicorn's supervisor)."""
    from runtime.front.server import FrontService, serve_processes
    from runtime.native.readiness import redis_problems
    from runtime.stores.redis_client import redis_client

    redis_url = _required(settings.redis_url, "HORDE_REDIS_URL", "front")
    env = dict(os.environ)
    if native_roots:
        env["HORDE_FRONT_NATIVE_ROOTS"] = native_roots
    config = front_config(redis_url, env)
    redis = redis_client(redis_url)
    try:
        found = redis_problems(redis)
    finally:
        redis.close()
    if found:
        raise Refused("; ".join(found))
    try:
        if processes > 1:
            return serve_processes(
                config,
                host=host or settings.front_host,
                port=settings.front_port if port is None else port,
                processes=processes,
                out=out,
            )
        with stop_on_signals(stop_event or threading.Event()) as stop:
            service = FrontService.start(
                config,
                host=host or settings.front_host,
                port=settings.front_port if port is None else port,
            )
            return serve_until(stop, service, out)
    except PortInUse as taken:
        raise _port_refused(taken, "--port or HORDE_FRONT_PORT") from taken
