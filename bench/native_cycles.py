"""Pop+submit cycles per second on the native API, 10,000 text requests queued, 8 workers.

Prints figures, never passes or fails on time:
``pop_submit_cycles_per_s`` (one native process) and ``pop_submit_cycles_per_s_2proc`` (two),
and ``pop_submit_server_cpu_ms``: this process's CPU (the one native process and its
threads; the client is another process) over the 1-process run, divided by its cycles (the
measured ones, counted as the rate times ``SECONDS``, and the warm-up's), the robust figure
on a shared machine.

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

Where the time goes. Measured in process with cProfile (CPU clock) on pop+submit through
Flask's test client, one worker (no HTTP: the views, Flask, the limiter, the database and
Redis calls); per process with /proc CPU times over a 1-process run (the server, Postgres's
backends, Redis, the client); and py-spy (``--gil``) on the server. The 2-core machine is
shared with other sessions' work: the load average (``uptime``) is given with each figure.

Earlier sessions (fc0c25a^ -> f2644ac): ~35 -> 23 database round trips a cycle and 6 -> 2
Redis ones: one transaction each for pop and submit, the pick as one UPDATE ... FROM
(SELECT ... FOR UPDATE SKIP LOCKED) RETURNING, Core updates, the limiter's headers from its
hit's own script (``runtime/native/api/limit_storage.py``).

Before this session (f2644ac, issue 14): 24.9 ms of server CPU a cycle in process; 17
statements (ORM and Core, each SQL expression and its cache key built per call: the pop's
~30 eligibility conditions per pop, the entities of the key's user, the job's three rows,
the worker and the request loaded), plus the pool's pre-ping, BEGIN and COMMIT per
transaction. Bench: 30.9 cycles/s (1 process) and 29.5 (2) at load 1.0; 42.0-46.5 and
32.6-43.4 at load 4-5; 27.7 and 8.2 at load 6-9.

This session's cuts (each its own commit):

- The pop is one statement, compiled once per declaration shape (``queue.jobs._pop_sql``;
  ``queue.fit``'s rules take the worker's terms, bound parameters here, literals for the
  status): the key's user, a known worker's refresh (not in maintenance), the pick (SKIP
  LOCKED), its n and its jobs' INSERT; run in autocommit (no BEGIN, no COMMIT) on the
  driver connection: no SQL expression built, no entity loaded. A new name, another
  user's, maintenance or a refused key take the transaction as before.
- A text submit is three statements in its transaction (``queue.submit``): the key and the
  job read together; the claim with the speed sample, the worker's counters, the owner's
  reward and ledger row and the request's lock; the charge with the count of running jobs
  (a snapshot after that lock), the request's deactivation and its holds' release. The chat
  submit pays through the same ``pay``.
- The workers' lane (pop, submit, progress, heartbeat) runs its views buffered
  (``runtime/native/asgi.py``): one hop to a thread and back instead of a2wsgi's hop per
  body, response start and chunk (a tiny view, 8 at a time: 0.77 -> 0.22-0.27 ms CPU a
  request).

After: 3.5 ms of server CPU a cycle in process (before the last two cuts, which act on the
HTTP path); 8 database round trips a cycle (pop: pre-ping, 1 statement; submit: pre-ping,
BEGIN, 3 statements, COMMIT) and 2 Redis ones. Per process over a 1-process run at load
3-4: server 5.2-5.5 ms CPU a cycle, Postgres 1.6-2.0, the client 0.8-1.1, Redis 0.1.
Bench: 127 cycles/s (1 process) and 168 (2) at load 2.4-3.0 (the submit cut alone);
114-138 and 123-172 at load 4-7 (f2644ac beside it: 42-46 and 33-43); with every cut,
77-138 and 78-121 at load 5.5-9.4, f2644ac run alternately with it 25.6 and 11-23.

Then (issue 14, 20ade00 and 7ae220b, each its own commit): the pool pings only a connection
back in it for over a second (``stores/database.py``; a busy one lost to a restart fails its
request with a 503 and SQLAlchemy invalidates the whole pool), so a cycle is 6 database round
trips (pop: 1 statement; submit: BEGIN, 3 statements, COMMIT); and flask-limiter's
before_request check is removed (this limiter has no default or application limits, so it
counted nothing; 39-42 us of CPU a request, measured on its own in process at load 4.7,
not the ~10% its share of py-spy's samples suggested: that was mostly the decorator's check
and the Redis script). Bench, ee584a5 (before) and 7ae220b (after) run alternately:
before 124 and 123 cycles/s (1 process), 103 and 121 (2) at load 5.4-6.5; after 141, 132
and 135 (1), 145, 148 and 137 (2) at load 2.4-6.5. The bench process's CPU over the
1-process run, divided by its cycles (the server and its threads, no client): before
9.3 and 10.0 ms a cycle, after 6.8-7.8 at load 4.7-7.0 (noisy: the pool cut alone gave 5.1
and 7.0 at load 5).

Then (issue 14, 44057fe): the workers' lane (pop, submit, progress, heartbeat) is served
without Flask (``runtime/native/api/lane.py``): the ASGI shell reads the body and hands a
framework-free request to the same view functions on the lane's thread pool (one hop there
and back); the limiter's check for these routes is ``HordeLimiter.lane_hit`` (the limit
strings parsed once, one Redis script call a limit, flask-limiter's keys, headers and
fallback state), the error envelope, access log and metrics are framework-free functions
the Flask hooks share. The bench process's CPU over the 1-process run divided by its
cycles (the server and its threads), that commit's parent and it from clean copies run
alternately (A B A B): before 4.50 and 4.48 ms a cycle, after 3.61 and 3.49, at load
2.8-6.5; cycles/s before 155.9 and 163.6 (1 process), 163.0 and 147.7 (2); after 169.6 and
173.6 (1), 149.6 and 181.3 (2). An earlier pair at load 5-14: 4.89-5.54 -> 3.31-4.16 ms.

What remains, by the server's GIL time (py-spy --gil, 1 process, after 44057fe, load ~6):
the database driver and SQLAlchemy under the views ~29% (psycopg's execute and parameter
dumping for the pop's one statement and the submit's three, the ORM Session, its
connection checkout and commit around them: ``queue/jobs.py``, ``queue/submit.py``,
``stores/database.py``), the event loop ~20% (uvicorn's httptools parsing, asyncio, the hop
to the lane's threads: ``run_in_executor`` is ~20 us of CPU a request, a bare queue and
``call_soon_threadsafe`` would be ~6), the header and body checks with the declaration's
parse ~10% (jsonschema: ``api/validation.py``, ``contract/declaration.py``), the views' own
Python ~11%, the limiter ~7% (nearly all redis-py's script call: ~61 us of CPU a call,
~49 with hiredis, not installed), the access log and metrics ~6%, the lane's request and
response framing ~4% (before, Flask and werkzeug were 16.4% of the server's GIL time as
self time). In process
(Lane.respond called in a loop, no HTTP): ~3.2 ms of CPU a cycle. 500 cycles/s on 2 cores
needs all of a cycle's CPU (server, Postgres, client) under ~4 ms with nothing else
running; the server alone is ~3.5 ms now. What would remove more: the pop's and the
submit's statements run on a pooled driver connection without an ORM Session (its
begin/commit/checkout machinery is most of SQLAlchemy's share), a compiled validator for
the lane's bodies (fastjsonschema or jsonschema-rs, both in the package index), and fewer
round trips per submit. Two processes add
throughput only when the machine has a core to spare.

Then (helper hP, issue 14: the pop's side). The lane's thread CPU per view over the 1-process
run (Lane.respond wrapped, time.thread_time), at load 2-5: a text pop ~0.75-0.86 ms, a text
submit ~1.0-1.15 ms; the rest of the server's ~2.3-2.7 ms a cycle is the event loop (uvicorn's
parsing, the hop to the lane's threads and back). A known worker's pop now runs on a Core
connection instead of an ORM Session: text pop p50 0.785/0.750 -> 0.713/0.690 ms (B A B A,
load 5.1-8.1). psycopg's per-execute split of a long statement (``runtime/stores/raw_sql.py``)
did not cost the text pop: its statement (3.8 KiB, 31 values) is under psycopg's cache
limits; a chat worker's (5.4 KiB) is not. A B A B against ec355f1 at the end, load 2.0-4.9:
pop_submit_server_cpu_ms 2.27/2.46 -> 2.15/2.52 ms, pop_submit_cycles_per_s 326.3/255.0 ->
294.2/264.8, 2 processes 400.3/251.7 -> 277.2/230.5 (the load decides these; the pop's
~0.07 ms is under their noise). Where a text pop went before the Core connection
(cProfile, so shares only): register_and_pop ~37% (its statement's values and run, the
Session's begin/commit/checkout ~23% of the pop), the limiter's Redis script ~20%, the access
log and metrics ~9%, the body's checks ~6%, the transient ORM Worker its terms are read
from ~5%.

Then (issue 14, the next session; each its own commit, A B A B against its parent). The lane
thread's CPU per view over the 1-process run (Lane.respond wrapped, time.thread_time) said
where a cycle's ~2.2 ms of server CPU went: a text pop ~0.71 ms, a text submit ~1.03 ms,
the event loop and the rest ~0.42. Of the submit, five database round trips (BEGIN, the
find, the claim, the charge, COMMIT: ~50 us of CPU each in psycopg's execute and wait) and
the ORM Session's transaction (~65 us); of each request, the limiter's Redis script call
(~0.14 ms of thread CPU in the bench, ~68 us alone).

- The submit's statements as RawSql, and the lane's hop to its threads without
  run_in_executor (``runtime/native/lane_threads.py``, 41 -> 16 us a hop alone), and a pop's
  disconnect watcher started only when it waits: pop_submit_server_cpu_ms 2.46/2.40 ->
  2.17/2.29, cycles/s 368/373 -> 411/390 (1 process), 456/453 -> 464/477 (2), load 0.4-3.9.
- A job's payment is one database function, ``horde_pay`` (migration 0007: the claim, then
  the charge and the request's end in statements of their own, so the count after the
  request's lock still sees a concurrent submit), and a text submit's happy path is the find
  and that call on one autocommit Core connection: two round trips, no BEGIN, COMMIT or
  Session. The submit's view 1.03 -> 0.74 ms; pop_submit_server_cpu_ms 2.58/2.49 ->
  1.88/1.93, cycles/s 353/367 -> 460/445 (1 process), 436/463 -> 525/472 (2), load 0.3-4.2.
- The limiter's EVALSHA packed once per key and sent on a pooled connection
  (``api/limit_storage.py``): lane_hit 0.150/0.145 -> 0.104/0.103 ms a request;
  pop_submit_server_cpu_ms 1.95/1.87 -> 1.84/1.83, cycles/s 449/450 -> 472/458 (1),
  574/532 -> 531/550 (2), load 0.5-2.

Then (issue 14, 2026-12-04; each its own commit, A B A B against b4d3ae9 from clean
copies, load 1.6-5.3). A lane thread's CPU per part over the 1-process run
(time.thread_time around each, p50): the autocommit statements' checkout set and reset the
isolation level each time (``execution_options`` on the transactions' pool: ~23 us of CPU
and two driver calls a checkout alone), now a pool of their own in autocommit from the
connect (``stores.database.autocommit_engine``): text pop 0.598 -> 0.541-0.567 ms, text
submit 0.659 -> 0.601-0.625; the access log's line written straight to its handler's
stream (``observability.access_log``, no LogRecord): finish_request 0.056 -> 0.023 ms a
request; the limiter's hit on a Redis connection its thread holds, not one from the pool
at each call: lane_hit 0.067 -> 0.046 ms a request. pop_submit_server_cpu_ms 1.73/1.75/1.83
and 1.82/1.74 -> 1.57/1.61/1.62 (the first two) and 1.52/1.51 (all three);
pop_submit_cycles_per_s 483/477/462 and 463/476 -> 526/511/494 and 517/537 (1 process);
549/554/531 and 546/532 -> 571/575/569 and 602/544 (2). What is left, by py-spy --gil
over the 1-process run after the first cut: the views ~56% (the pop's one statement ~11%,
the submit's two ~13%: psycopg's parameter dumping and result handling; the limiter ~5%;
the body's checks ~3%), the event loop ~23% (uvicorn's parsing, and its two socket sends a
response, head and body: ~15 us of CPU each in the send alone). Measured and not kept: 4
or 8 lane threads instead of 16 (477/482 and 481 vs 503/485 cycles/s); a shorter
sys.setswitchinterval (within the noise at load 4-6).

Not the limit: the requester's row, which every submit's charge locks (the bench queues
every request for one requester). With the queue spread over 8 requesters, 418/393 vs
390/402 cycles/s (1 process), 497/491 vs 482/439 (2): within the noise. One process is
bound by its GIL: its server CPU a cycle (~1.85 ms) is 87-93% of a core at 460-480 cycles/s,
so 500 on one process needs it under ~1.75 ms. Measured and not kept: hiredis (lane_hit
-10 us, the figures did not move).
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
from runtime.stores.database import make_engine, make_sessionmaker, transaction
from runtime.stores.embedded import EmbeddedStores
from runtime.worker.llama_server import free_port

QUEUED = 10_000
WORKERS = 8
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
        try:
            cpu_before = _cpu_seconds()
            one = _measure([f"{service.url}/api/v2"], keys)
            cpu = _cpu_seconds() - cpu_before
        finally:
            service.stop()
        print(f"figure: pop_submit_cycles_per_s = {one:.1f} cycles/s", flush=True)
        cycles = one * SECONDS + WARMUP * WORKERS
        print(f"figure: pop_submit_server_cpu_ms = {cpu / cycles * 1000:.2f} ms", flush=True)
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


def _cpu_seconds() -> float:
    """This process's CPU time so far (user and system, every thread)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
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
