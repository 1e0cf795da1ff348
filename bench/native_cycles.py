"""Pop+submit cycles per second on the native API, 10,000 text requests queued, 8 workers.

The workers are a process of their own (bench/support/cycle_client.py: one forked process
and keep-alive connection per worker, HTTP written and read by hand to spend little of the
two cores the server runs on), so the client never shares the server's interpreter. A
cycle is one pop (FOR UPDATE SKIP LOCKED) and one submit (compare-and-set, payment); each
worker runs a few cycles first, then all run for ``SECONDS``, the queue topped up to 10,000
before each run. The rate limits are on as shipped at HORDE_RATE_LIMIT_SCALE=100, so the
limiter's Redis calls are on the measured path. One process is ``NativeService`` in this
process, settled as ``horde-chat native`` settles its own
(``runtime.service_process.settle``); two are ``horde-chat native --processes 2`` (or,
where the CLI has no ``--processes``, two processes on two ports).
Printed, never pass/fail: ``pop_submit_cycles_per_s`` (one process),
``pop_submit_cycles_per_s_2proc`` (two), ``pop_submit_server_cpu_ms`` (this process's CPU
over the 1-process run a cycle, the steadier figure on a shared machine),
``pop_submit_client_cpu_ms`` (the client's, its workers' processes included) and
``pop_submit_cycles_per_s_16_workers`` (one process, as many workers as the workers' lane has
threads: more pops and submits at once than a pool smaller than the lane could serve
without opening and closing a database connection a request). Run:
``.venv/bin/python bench/native_cycles.py``; docs/performance.md has the figures measured
so far and where a cycle's time goes.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, insert, select, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.native_stack import HORDE_CHAT, ROOT, wait_ready
from bench.support.cycle_client import measure
from runtime.config import Settings
from runtime.native.accounts.keys import create_user
from runtime.native.db.migrate import upgrade
from runtime.native.db.tables import WaitingPrompt
from runtime.native.queue.sweep import utcnow
from runtime.native.server import NativeService
from runtime.service_process import settle
from runtime.stores.database import make_engine, make_sessionmaker, transaction
from runtime.stores.embedded import EmbeddedStores
from runtime.worker.llama_server import free_port

QUEUED = 10_000
WORKERS = 8
MANY_WORKERS = 16
"""As many as the workers' lane has threads (``runtime.native.asgi.WORKER_LANE_THREADS``)."""
SECONDS = 8.0
WARMUP = 5
RATE_LIMIT_SCALE = 100


def main() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="horde-bench-"))
    stores = EmbeddedStores.start(Settings(data_dir=data_dir))
    try:
        upgrade(stores.database_url)
        keys, requester_id = _accounts(stores.database_url)
        settings = Settings(data_dir=data_dir, rate_limit_scale=RATE_LIMIT_SCALE, sweep_seconds=60)
        _top_up(stores.database_url, requester_id)
        service = NativeService.start(
            settings,
            database_url=stores.database_url,
            redis_url=stores.redis_url,
            port=0,
            sweep=False,
        )
        settle()
        try:
            server_before, client_before = _cpu_seconds(), _cpu_seconds(resource.RUSAGE_CHILDREN)
            one = _measure([f"{service.url}/api/v2"], keys[:WORKERS])
            server = _cpu_seconds() - server_before
            client = _cpu_seconds(resource.RUSAGE_CHILDREN) - client_before
            print(f"figure: pop_submit_cycles_per_s = {one:.1f} cycles/s", flush=True)
            cycles = one * SECONDS + WARMUP * WORKERS
            print(f"figure: pop_submit_server_cpu_ms = {server / cycles * 1000:.2f} ms")
            print(f"figure: pop_submit_client_cpu_ms = {client / cycles * 1000:.2f} ms", flush=True)
            _top_up(stores.database_url, requester_id)
            many = _measure([f"{service.url}/api/v2"], keys)
            print(f"figure: pop_submit_cycles_per_s_16_workers = {many:.1f} cycles/s", flush=True)
        finally:
            service.stop()
        _top_up(stores.database_url, requester_id)
        with _two_processes(stores, data_dir) as (urls, how):
            two = _measure(urls, keys[:WORKERS])
        print(f"two processes: {how}")
        print(f"figure: pop_submit_cycles_per_s_2proc = {two:.1f} cycles/s", flush=True)
    finally:
        stores.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def _accounts(database_url: str) -> tuple[list[str], int]:
    engine = make_engine(database_url)
    try:
        with transaction(make_sessionmaker(engine)) as session:
            requester, _ = create_user(session, "bench-requester", kudos=10**9)
            keys = [create_user(session, f"bench-worker-{i}")[1] for i in range(MANY_WORKERS)]
            return keys, requester.id
    finally:
        engine.dispose()


def _top_up(database_url: str, requester_id: int) -> None:
    """Queue text requests until QUEUED are waiting, then gather planner statistics (as
    autovacuum does shortly after a bulk load)."""
    engine = make_engine(database_url)
    try:
        with engine.begin() as connection:
            waiting = connection.scalar(
                select(func.count()).select_from(WaitingPrompt).where(WaitingPrompt.n > 0)
            )
            now = utcnow()
            rows = [
                dict(
                    id=uuid.uuid4(), user_id=requester_id, prompt="bench",
                    params={"max_length": 80}, n=1, jobs=1, max_length=80,
                    max_context_length=2048, models=[], workers=[], extra_priority=i % 100,
                    kudos_estimate=1, created=now, expiry=now + timedelta(hours=1),
                )
                for i in range(QUEUED - int(waiting or 0))
            ]  # fmt: skip
            if rows:
                connection.execute(insert(WaitingPrompt), rows)
        with engine.connect() as connection:
            connection.execute(text("ANALYZE"))
            connection.commit()
    finally:
        engine.dispose()


def _cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    """This process's CPU time so far (user and system, every thread), or with
    ``RUSAGE_CHILDREN`` its ended children's (the client's run, waited for, and its forks)."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _measure(urls: list[str], keys: list[str]) -> float:
    return measure(urls, keys, seconds=SECONDS, warmup=WARMUP)


@contextmanager
def _two_processes(stores: EmbeddedStores, data_dir: Path) -> Iterator[tuple[list[str], str]]:
    env = {
        **os.environ,
        "HORDE_DATABASE_URL": stores.database_url,
        "HORDE_REDIS_URL": stores.redis_url,
        "HORDE_DATA_DIR": str(data_dir),
        "HORDE_RATE_LIMIT_SCALE": str(RATE_LIMIT_SCALE),
        "HORDE_SWEEP_SECONDS": "60",
        "PYTHONPATH": str(ROOT),
    }
    helps = subprocess.run(
        [*HORDE_CHAT, "native", "--help"], capture_output=True, text=True, env=env, cwd=ROOT
    ).stdout
    ports = [free_port()] if "--processes" in helps else [free_port(), free_port()]
    extra = ["--processes", "2"] if len(ports) == 1 else []
    how = (
        "horde-chat native --processes 2"
        if extra
        else "two horde-chat native processes on two ports, workers split between them"
    )
    procs = [
        subprocess.Popen(
            [*HORDE_CHAT, "native", "--port", str(port), *extra],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # the access log: one line per request
        )
        for port in ports
    ]
    try:
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        for url, proc in zip(urls, procs, strict=True):
            wait_ready(url, proc)
        yield [f"{url}/api/v2" for url in urls], how
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    main()
