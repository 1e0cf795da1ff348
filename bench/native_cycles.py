"""Pop+submit cycles per second on the native API, 10,000 text requests queued, 8 workers.

Prints figures, never passes or fails on time:
``pop_submit_cycles_per_s`` (one native process) and ``pop_submit_cycles_per_s_2proc`` (two).

The workers are a separate process (``bench/support/cycle_client.py``: stdlib HTTP, one
forked process per worker, one keep-alive connection each), so the client never shares the
server's interpreter. Each cycle is one pop (FOR UPDATE SKIP LOCKED) and one submit
(compare-and-set, payment). Each worker runs a few cycles first (connections, statement
caches), then all run for ``SECONDS``. The rate limits are on, as shipped, at
HORDE_RATE_LIMIT_SCALE=100 (pop and submit are 60 a second per address; the 8 workers share
one address): the limiter's Redis calls are part of the measured path.

One process is ``NativeService`` in this process; two are ``horde-chat native --processes 2``
(one port, the kernel spreads the connections), or, where the CLI has no ``--processes``,
two ``horde-chat native`` processes on two ports with the workers split between them. The
queue is topped up to 10,000 before each run.

Where the time goes (py-spy on the bench, cProfile with a CPU clock on pop+submit through
Flask's test client, one worker; 2-core machine shared with other work, load 4-9):

Before (fc0c25a^): ~58-68 ms of server CPU a cycle, ~35 database round trips and 6 Redis
round trips. A submit was ~60% of a cycle: two transactions (its job's kind, then the
submit), each paying the pool's pre-ping, BEGIN and COMMIT; inside, ~19 ORM statements (the
bridge agent read again, each kudos move an UPDATE plus a flushed ledger INSERT, the speed
sample three statements, ORM UPDATEs synchronizing the session by evaluate/fetch), with the
requester's balance row, shared by every submit, locked from its charge to the commit. A
pop was two transactions (register, then pop) and its pick three round trips (SELECT FOR
UPDATE SKIP LOCKED, the ORM's UPDATE of n, the generation's INSERT). flask-limiter spent
three Redis round trips a limit (the hit, then GET and TTL for the X-RateLimit headers).
Figures, same machine back to back: 9.1-14.5 cycles/s (1 process), 7.9-14.4 (2 processes).

After: ~45 ms of server CPU a cycle, 23 database round trips, 2 Redis round trips. One
transaction each for pop and submit; the pop's pick is one UPDATE ... FROM (SELECT ... FOR
UPDATE SKIP LOCKED) RETURNING; a kudos move and a speed sample are one statement each; the
claim, the worker's counters and the hold release are Core UPDATEs; the requester's row is
locked last; the limiter's headers come from the hit's own script
(runtime/native/api/limit_storage.py). Figures: 16.3-21.7 cycles/s (1 process), 11.0-22.7
(2 processes), i.e. 1.5-2x. What remains, by CPU: building SQL expressions and their cache
keys every call (the pop's ~30 eligibility conditions are rebuilt per pop: ~15% of a pop),
the ORM's entity loading (the key's user, the job's three rows, the popped request), ~20
statements at ~0.5 ms of Python each, Flask and the limiter ~10%. Two processes do not add
throughput here because the machine's two cores are already busy with other work; 500
cycles/s needs a cycle at a few statements (a stored procedure or one statement per route)
and an unloaded machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import httpx
from sqlalchemy import func, insert, select, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.support.cycle_client import measure
from runtime.config import Settings
from runtime.native.accounts.keys import create_user
from runtime.native.db.migrate import upgrade
from runtime.native.db.tables import WaitingPrompt
from runtime.native.queue.sweep import utcnow
from runtime.native.server import NativeService
from runtime.stores.database import make_engine, make_sessionmaker, transaction
from runtime.stores.embedded import EmbeddedStores

ROOT = Path(__file__).resolve().parents[1]
QUEUED = 10_000
WORKERS = 8
SECONDS = 8.0
WARMUP = 5
RATE_LIMIT_SCALE = 100
HORDE_CHAT = [sys.executable, "-m", "runtime.cli"]  # this tree's, whatever is installed


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
        try:
            one = _measure([f"{service.url}/api/v2"], keys)
        finally:
            service.stop()
        print(f"figure: pop_submit_cycles_per_s = {one:.1f} cycles/s", flush=True)
        _top_up(stores.database_url, requester_id)
        with _two_processes(stores, data_dir) as (urls, how):
            two = _measure(urls, keys)
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
            keys = [create_user(session, f"bench-worker-{i}")[1] for i in range(WORKERS)]
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


def _measure(urls: list[str], keys: list[str]) -> float:
    return measure(urls, keys, seconds=SECONDS, warmup=WARMUP)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
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
    ports = [_free_port()] if "--processes" in helps else [_free_port(), _free_port()]
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
            _wait_ready(url, proc)
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
