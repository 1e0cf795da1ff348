"""What the native API's benches share: the embedded stores with the native API on a free
port (migrated, rate limits off unless asked for, sweep off, all in a temporary folder
removed afterwards), in the bench's process (``native_service``) or, as it is deployed, in
a process of its own (``native_process``: ``horde-chat native``), so the bench's own
threads (its client, its worker, its subscribers) do not share the server's interpreter and
its lock. The pop+submit workers are bench/support/cycle_client.py, a process of their own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from redis import Redis
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.config import Settings
from runtime.native.db.migrate import upgrade
from runtime.native.server import NativeService
from runtime.stores.database import make_engine, make_sessionmaker
from runtime.stores.embedded import EmbeddedStores
from runtime.stores.redis_client import redis_client
from runtime.worker.llama_server import free_port

Job = dict[str, Any]
ROOT = Path(__file__).resolve().parents[1]
HORDE_CHAT = [sys.executable, "-m", "runtime.cli"]  # this tree's, whatever is installed


@contextmanager
def native_service(*, rate_limits: bool = False) -> Iterator[NativeService]:
    """The native API on the embedded Postgres and Redis, stopped and removed on exit
    (``rate_limits``: the shipped ones on, as ``make run`` has them; else off)."""
    data_dir = Path(tempfile.mkdtemp(prefix="horde-bench-"))
    stores = EmbeddedStores.start(Settings(data_dir=data_dir))
    try:
        upgrade(stores.database_url)
        service = NativeService.start(
            Settings(rate_limits_enabled=rate_limits, data_dir=data_dir),
            database_url=stores.database_url,
            redis_url=stores.redis_url,
            port=0,
            sweep=False,
        )
        try:
            yield service
        finally:
            service.stop()
    finally:
        stores.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@dataclass(frozen=True)
class NativeProcess:
    """The native API in a process of its own, and the bench's handles on its stores."""

    url: str
    pid: int
    engine: Engine
    sessions: sessionmaker[Session]
    redis: Redis
    redis_url: str


@contextmanager
def native_process() -> Iterator[NativeProcess]:
    """``horde-chat native`` (one process, rate limits off as ``native_service``'s, the
    sweep every hour) on the embedded Postgres and Redis, stopped and removed on exit."""
    data_dir = Path(tempfile.mkdtemp(prefix="horde-bench-"))
    stores = EmbeddedStores.start(Settings(data_dir=data_dir))
    try:
        upgrade(stores.database_url)
        port = free_port()
        env = {
            **os.environ,
            "HORDE_DATABASE_URL": stores.database_url,
            "HORDE_REDIS_URL": stores.redis_url,
            "HORDE_DATA_DIR": str(data_dir),
            "HORDE_RATE_LIMITS": "off",
            "HORDE_SWEEP_SECONDS": "3600",
            "PYTHONPATH": str(ROOT),
        }
        proc = subprocess.Popen(
            [*HORDE_CHAT, "native", "--port", str(port)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # the access log: one line per request
        )
        engine = make_engine(stores.database_url)
        redis = redis_client(stores.redis_url)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, proc)
            yield NativeProcess(
                url, proc.pid, engine, make_sessionmaker(engine), redis, stores.redis_url
            )
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            redis.close()
            engine.dispose()
    finally:
        stores.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    """Until ``url``'s /readyz answers 200 (SystemExit when the process exits first)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"horde-chat native exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} never became ready")


def analyze(service: NativeService) -> None:
    """Planner statistics for the freshly loaded queue, as autovacuum gathers them shortly
    after a bulk load in a running deployment (without them the planner guesses)."""
    with service.context.engine.connect() as connection:
        connection.execute(text("ANALYZE"))
        connection.commit()
