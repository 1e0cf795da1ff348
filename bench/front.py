"""The chat front's figures on the real stack, side by side in one run (printed, never
pass/fail): the embedded Postgres and Redis, the native API (bench/native_stack.py), the front
as its own process (``python -m runtime.front``) and one worker answering over the native
HTTP pop/submit routes (bench/front_stack.py). Loopback only; everything stops at the end.
The native API has no service passkey here, so the front forwards no client address.

1. Added latency, SAMPLES pairs, both legs with the same httpx client and the same worker,
   which starts popping back to back when the client starts (so both legs carry the same
   pop-finding delay and the same native submit):
   - native direct: POST chat async (with an operation key), then what the front does to
     learn of the reply and nothing more, from the bench process: on one pattern
     subscription held for the whole leg (``Heard``, as the front's hub), wait for the event
     naming the request's outcome key (held if it came before the submit's answer) and read
     the key from Redis. (A GET of the status route once the worker's submit returned, the
     baseline once, came after the publish the front wakes on, so the front looked faster
     than the direct client and the added latency printed negative; until 2026-12-04 this
     leg subscribed to the request's channel, looked the outcome key up and unsubscribed,
     as the front then did.)
   - through the front: one POST /v1/chat/completions (admission, validation, the native
     submit, which answers with the first status, the wait filed on the hub's pattern
     subscription, the wake and the final status read from the outcome key the signal
     names, the OpenAI response; no status read on this happy path).
   The added latency is the front's percentile minus the direct one: the front's own cost
   (its HTTP hop, admission, validation, wait, wake-up and response).
2. Worker submit -> client has the reply: the worker holds each popped job until the front's
   wait is open (the front's /metrics counts it, then SETTLE); from sending the submit (the
   native API verifies,
   stores, charges, stores the final status and publishes) to the client holding the reply.
3. Memory per open wait: WAITS concurrent requests held open by a child process (the worker
   answers none until measured, its check-in kept fresh; the front's caps and the user's
   native concurrency raised; fallback poll 60 s), counted on the front's /metrics; the
   front's RSS then over its RSS before, divided by WAITS. Then the worker answers them all
   and every reply is checked.

Figures besides the table: ``front_cpu_per_request_ms``, the front process's CPU (psutil,
user + system) over the added-latency leg's front requests after the warm-up, the robust
figure on a shared machine; and where a delivery's time goes, from a pattern subscriber of
the bench's own: the native submit until its event is published, from there to the client
holding the reply (the front's wake, outcome read and answer), and the submit's own answer.

Where the front's time goes (2026-12-03, after its native calls moved from httpx to aiohttp;
psutil, py-spy at 200 Hz, cProfile in the serving thread; 2 cores shared with other work):
- CPU per plain request, A B A B at load 5.9-12: 7.23/6.43 ms through httpx, 5.57/5.07 ms
  through aiohttp; later 4.6-5.6 ms at load 2-5, ~90% of it user time. In py-spy's busy
  samples the submit fell from 38% (httpx, httpcore, anyio) to 9%.
- The front sleeps (and is woken) ~6.3 times a plain request (its threads' voluntary context
  switches, printed beside the CPU): the client's request, the native submit's answer, the
  subscription's confirmation, the outcome lookup, the signal, the outcome read, the
  unsubscribe's reply. A wake is dear on this VM, ~0.13 ms of CPU (a Starlette handler's
  server 0.25-0.31 -> 0.89-0.95 ms a request when it also sleeps 5 times, load ~2; an idle
  front spends 2-4 ms/s on uvicorn's 0.1 s tick), so the wakes are ~0.8 ms of the ~5; the
  rest is Python across ~4,400 calls a request (cProfile in the serving thread: the wait and
  its four Redis commands, the submit, Starlette's and our middleware, the validation, the
  access log line).
- py-spy's busy samples by caller: socket writes 29% (Redis's four commands 18%: subscribe,
  outcome lookup, outcome read, unsubscribe), uvicorn and Starlette's middleware serving the
  client, redis-py's RESP3 parsing ~4%, the request's validation ~4%, the access log ~2%.
- Measured and not kept: hiredis beside redis-py (front CPU 5.03/5.40 without, 5.27/5.20 ms
  with, A B A B at load 3-5); the front's response head and body coalesced into one send
  (one write fewer a response; a server's CPU 170-197 vs 173-207 us a request in isolation,
  5.57/4.87 vs 4.57/5.03 ms a front request); the hub unsubscribing on the ending event, so
  the unsubscribe's round trip overlaps the outcome read (sleeps 6.3/6.3 -> 5.9/6.4 a
  request, CPU 5.00/5.50 -> 5.37/5.47 ms).
- Delivery: its slow samples are the native submit (submit sent -> event published 130-440
  ms in the five slowest at load 12, 23-66 ms at load 1-5); the front's part, event
  published -> client has the reply, 2.6-3.6 ms p50, 5.5-12 ms p99 at load 1-5.
- The native submit until its event is published (issue 14, helper hS, A B A B against
  ec355f1): a chat submit was 12 statements (two transactions: the kind lookup's, then the
  submit's, which read the key's user again; the final status's request, jobs and online
  workers after the commit) and 3 Redis round trips (a lease read and a lease end that find
  nothing for a request that streams no deltas, the outcome key and events' pipeline); now 7
  statements (one transaction; the final status built from the submit's rows, only the online
  workers read) and 1 round trip. submit sent -> event published p50 15.04/13.87 -> 11.44/8.24
  ms, delivery p50 18.18/16.89 -> 14.67/11.10 ms (load 5-8); in process, the lane thread's
  CPU per chat submit 4.62/4.70 -> 3.36/3.69 ms (load 5-6). What is left is mostly round
  trips (cProfile's wall clock: ~3.4 ms of a submit's ~7 waiting on Postgres at load 4) and
  the ORM loads of the job's rows and of the online workers. Measured and not kept: the
  submit's first statement sent in psycopg's pipeline mode, so BEGIN rides with it (CPU per
  chat submit 2.99/3.15 -> 3.29/3.23 ms, view wall p50 4.54/4.76 -> 6.54/4.87 ms, load 3.2-3.4).
  The text cycles, whose payment's statement now also counts the request's jobs, kept their
  pace (bench/native_cycles.py: pop_submit_server_cpu_ms 2.59/2.61 -> 2.59/2.37 ms,
  pop_submit_cycles_per_s 315/275 -> 296/331, load 2.8-5.3).

The wait's Redis commands (2026-12-04, later): each wait subscribed to its request's channel,
waited for the confirmation, looked the outcome key up and unsubscribed, three of its four
commands. Now the hub holds one pattern subscription from its start and keeps an event read
before its wait opens (runtime/front/signals.py); a wait that may have missed one looks the
key up as before. Measured with two fronts, the old tree's and the new, on one native API and
one worker, taking requests in turn (rounds of 150, the order alternating, 4 rounds after a
warm-up; a temporary script): front CPU per request 3.90 / 4.22 / 4.17 ms (before) -> 3.07 /
3.22 / 3.08 ms (after) in three runs, the same tree on both sides 3.43 / 3.27; the request's
p50 37.3 / 40.1 / 40.8 -> 36.4 / 37.8 / 37.3 ms. This file's own A B runs on the same hour
moved ~0.4 ms from run to run, more than the change: only the side-by-side run showed it.

Where a delivery's time goes (2026-12-04, perf_counter stamps in the native API, the front
and this bench, comparable across processes; the idle 2-core VM, whose speed moved ~25%
within the hour, so only pairs from one sitting compare):
- Before (050c259), p50 from the submit reaching the native ASGI app to the front holding the
  final status: 3.40 ms. Of it: the key and the job's kind 0.33, the job as ORM entities
  0.54, the payment 0.94, the online pool for the final status 0.39, the Redis SET and
  PUBLISHes 0.24, the lane's hop and rate limit 0.14.
- Now a chat reply's key, job and the online pool are one round trip (two statements in a
  pipeline, the job's rows built without the ORM's loader and without the conversation:
  runtime/native/queue/chat_find.py), 0.57 ms, and the final status needs no read (0.06):
  2.90 ms. A B A B in one sitting (12:20-12:23, idle, 269f48e): delivery p50/p99 4.69/6.30
  and 5.01/6.38 ms -> 4.32/5.63 and 4.21/5.62; at 12:32-12:35, slower, 724cbff: 5.88/7.59,
  6.02/7.83, 5.98/7.99 -> 5.16/6.72, 5.15/6.85, 5.57/7.35. chat_pop_submit_cycles_per_s
  (bench/native_chat.py) 256 -> 309.
- The payment is the largest part: horde_pay's executor time is ~0.38 ms (auto_explain,
  median), its statements' own ~0.2; its commit waits for the WAL flush. The same run with
  synchronous_commit off (an experiment, never a setting) took the payment from 1.14 to
  0.87 ms p50 and 2.16 to 1.23 ms p99: the flush is ~0.27 ms p50 and most of the tail.
- The find's two statements take 0.07 ms on the server; alone, the call is 0.24 ms
  (0.21 the pipeline); in the bench 0.57: the lane thread and Postgres waking on 2 cores
  after the idle SETTLE.
- The ends are clients': the worker's httpx submit to the ASGI app 0.40 ms p50; the front's
  answer sent to the client (httpx) holding it 0.44 ms. The front itself, event published to
  answer sent: 0.13 woken, 0.29 the outcome GET and its reading, 0.09 the response.
- Garbage collection is not the tail: 6 of 300 deliveries overlapped a collection in the
  native API or the front (gc.callbacks); a larger first threshold made 8.7 ms pauses.

What an open wait holds (2026-12-03, tracemalloc of the front at 1,000-2,000 waits; the
figure is RSS, ~33.5 KiB a wait on ec355f1 at 2,000 waits, 33.3 at 10,000):
- asyncio: three tasks a wait beyond the request's and its disconnect listener (the work and
  the two ends DisconnectWatch.run waited on) and a fourth from asyncio.wait_for around the
  signal, with their coroutine frames, futures and weakrefs in asyncio's task set; three
  asyncio.Events (the Signal, the channel's confirmation, the client's end), a deque of
  ~0.76 KiB each. Gone: the work runs in the request's task, flags are slotted Flags
  (33.5 -> 25.2 KiB).
- the submit's first status, whole (~30 fields, each key its own string from the parse,
  ~1.9 KiB): now only the fields a wait reads of a status not final (25.2 -> 23.4 KiB).
- RequestIdMiddleware's frame and send wrapper, now one layer with ObserveMiddleware
  (23.4 -> 23.0 KiB).
- Left, not ours: uvicorn's connection (httptools parser ~0.9 KiB, its pipeline deque and
  flow control Event ~1.5 KiB, the scope and its headers), Starlette's two middlewares'
  frames and send wrappers, the kernel's socket buffers (not in RSS).
- At 10,000 waits after these: 23.3 KiB a wait (front RSS ~300 MiB, ~390 before; 20:49-20:54
  UTC, load 4-13).
- They did not move the plain request's CPU or added latency measurably: at load 0.7-1.8,
  A B A B (ec355f1 / acb3a4d, 300 samples) front_cpu_per_request_ms 3.10/3.20 vs
  3.13/3.17, front_added_p50_ms 1.44/1.02 vs 1.35/1.50, sleeps 5.3-5.4 vs 5.3-5.6 a
  request: the tasks that went were scheduled a few times a request, the ~3 ms are the
  Redis round trips and Python of the rest. Measured and not kept: the body read under
  asyncio.timeout in the request's task instead of asyncio.wait_for's task (3.30/3.30 vs
  3.27/3.07 ms, load 1.8-6.7).

uvloop as both servers' event loop (2026-12-04, measured and not kept; uvicorn's
loop="auto" takes it when installed): A B A B against asyncio's loop, 50 waits, 20:12-20:21,
load ~1: front_cpu_per_request_ms 4.00 / 4.27 (asyncio) vs 4.17 / 3.97 (uvloop),
front_added_p50_ms 4.17 / 2.98 vs 3.49 / 4.00, delivery_p99_ms 16.75 / 16.65 vs 15.56 /
15.44; bench/e2e_overhead.py's e2e_horde_p50_ms 40.68 / 57.93 vs 47.04 / 37.37. No
difference a run could tell from the noise: the front's time is Python in the handlers,
redis-py and aiohttp (py-spy, 500 Hz: no frame of the request's own above ~4% of its busy
samples but the socket writes, ~34%, where the woken reader takes the CPU on 2 cores),
not the loop's own scheduling.

Where the front's CPU goes, again (2026-12-05 06:2x-06:37, idle, host_python_ms 25.38;
this bench: front_added_p50_ms / p99 3.16 / 2.75, front_cpu_per_request_ms 2.67, 5.5
sleeps a request):
- perf record (on-CPU samples only, 999 Hz, 915 front requests): 82% in libpython (the
  interpreter), 8% the kernel, 4% libc, ~4% the C parsers (httptools, multidict, json). The
  front's CPU is Python bytecode. py-spy counts a thread that is runnable but waiting for a
  core as busy: its ~half of the front's samples in epoll_wait is the wait for a core after
  a wake on the 2 shared cores, not CPU.
- cProfile of the serving thread, 800 requests (profiled time ~2x the real), self time by
  package: asyncio's loop and streams 21%, C methods (socket sends and receives, the JSON
  scanner) 16%, aiohttp 15%, runtime/front 11%, redis-py 10%, json 5%, uvicorn 4%,
  runtime/contract (the validation) 3%, Starlette 3%, prometheus-client 1.4%. A request runs
  21 turns of the loop, 27 handles, 9 timers made and cancelled (aiohttp's read timeout is
  rescheduled at each chunk) and 5 tasks. By step, inclusive, profiled ms: the native submit
  through aiohttp 0.87, the response (JSONResponse through four send wrappers to uvicorn)
  0.50, the outcome read (redis-py GET) 0.45, the validation 0.43, the hub reading the
  request's two events 0.55, the body read 0.12. No step is a fifth of the whole.
- The floor (bench/hop_floor.py, the same hour): a bare uvicorn app sending each request on
  through one aiohttp session adds 0.41 ms p50 and 0.41 ms p99 to a request, for 0.48 ms of
  CPU. The front's other ~2.2 ms a request are the pieces above, each a few tenths. A front
  adding <= 1 ms p50 would have to cost about what the bare hop costs: without Starlette's
  layers, aiohttp's request machinery or redis-py's client, which is another front, not
  this one tuned.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import psutil
from redis import Redis
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.front_stack import (
    BenchWorker,
    bench_users,
    hold_open_waits,
    start_front,
    stop_front,
)
from bench.native_stack import NativeProcess, native_process
from bench.support.figures import percentile
from bench.support.host import print_host_figures
from generated.signals import CHAT_FIELD_OUTCOME, CHAT_SIGNALS
from tests.support.front import open_waits as open_wait_count

SAMPLES = int(os.environ.get("BENCH_FRONT_SAMPLES", "300"))
WARMUP = 20
WAITS = int(os.environ.get("BENCH_FRONT_WAITS", "10000"))
MODEL = "bench-front-7B"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello"}]}
SETTLE = 0.03
"""After the front counted the wait open: time for it to take the submit's status."""
POLL = 0.005
"""How often the delivery leg reads the front's open waits (each read is a request to it)."""
TIMEOUT = 30.0
OPEN_TIMEOUT = 1800.0
"""Bounds the memory leg's opening and its draining (thousands of native submits, pops)."""
ALL_CHANNELS = CHAT_SIGNALS.channel("*")
CHECK_IN_EVERY = 30.0
"""While the memory leg's waits open, the worker's check-in is refreshed this often: a real
worker long-polls meanwhile, but this one must not take the jobs until they are all open, and
opening 10,000 on a busy 2-core machine outlasted the native API's 300 s online window (the
later submits were refused 503 no_eligible_worker)."""


class Memory(NamedTuple):
    idle: int
    waiting: int
    opened: float
    drained: float


def pct(values: list[float], p: float) -> float:
    """The percentile of samples in seconds, in milliseconds."""
    return percentile(values, p) * 1000


def until(condition: Callable[[], object], timeout: float, what: str, step: float = 0.001) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(step)


class Heard:
    """The direct leg's signal listener, as the front's hub: one pattern subscription held
    for the whole run, read in the caller's thread (the front's is read on its event loop)."""

    def __init__(self, redis: Redis) -> None:
        self.pubsub = redis.pubsub(ignore_subscribe_messages=True)
        self.pubsub.psubscribe(ALL_CHANNELS)
        self.held: dict[str, str] = {}
        """Outcome keys heard, by channel, not yet waited for."""

    def outcome_key(self, request_id: str) -> str:
        """The outcome key the request's ending event names (held if it came first)."""
        channel = CHAT_SIGNALS.channel(request_id)
        deadline = time.monotonic() + TIMEOUT
        while channel not in self.held:
            if time.monotonic() > deadline:
                raise TimeoutError(f"request {request_id} not answered")
            message = self.pubsub.get_message(timeout=TIMEOUT)
            if message is not None:
                key = CHAT_SIGNALS.parse(message["data"]).get(CHAT_FIELD_OUTCOME)
                if key is not None:
                    self.held[message["channel"]] = key
        return self.held.pop(channel)

    def close(self) -> None:
        self.pubsub.close()


def direct_request(native: httpx.Client, redis: Redis, heard: Heard) -> None:
    """A native client with the front's signal and nothing else: submit, wait for the event
    naming the request's outcome key (the front's hub heard it, whenever it came) and read
    the key."""
    key = {"X-Operation-Key": secrets.token_urlsafe(24)}
    accepted = native.post("/generate/chat/async", json=BODY, headers=key)
    request_id = accepted.raise_for_status().json()["id"]
    outcome = redis.get(heard.outcome_key(request_id))
    if outcome is None or not json.loads(outcome)["done"]:
        raise RuntimeError(f"request {request_id} not done at its outcome: {outcome!r}")


def front_request(front: httpx.Client) -> dict[str, object]:
    response = front.post("/chat/completions", json=BODY)
    if response.status_code != 200:
        raise RuntimeError(f"front answered {response.status_code}: {response.text}")
    return dict(response.json())


def sleeps(pid: int) -> int:
    """The voluntary context switches of every thread of ``pid`` (Linux): the times they
    slept, each followed by a wake. psutil's count is the main thread's alone."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        with contextlib.suppress(OSError):
            for line in status.read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


def added_latency(
    native: httpx.Client, front: httpx.Client, worker: BenchWorker, redis: Redis, front_pid: int
) -> tuple[list[float], list[float], float]:
    """The direct and the front leg's latencies, and the front process's CPU seconds per
    front request after the warm-up (the front serves nothing during the direct legs)."""
    direct: list[float] = []
    through: list[float] = []
    front_process = psutil.Process(front_pid)
    cpu_before = front_process.cpu_times()
    switches_before = sleeps(front_pid)
    heard = Heard(redis)
    for i in range(WARMUP + SAMPLES):
        t0 = time.perf_counter()
        worker.want()
        direct_request(native, redis, heard)
        t1 = time.perf_counter()
        worker.answered.acquire(timeout=TIMEOUT)  # the direct leg's (outside the timings)
        t2 = time.perf_counter()
        worker.want()
        front_request(front)
        t3 = time.perf_counter()
        worker.answered.acquire(timeout=TIMEOUT)  # the front leg's (outside the timings)
        if i >= WARMUP:
            direct.append(t1 - t0)
            through.append(t3 - t2)
        if i == WARMUP - 1:
            cpu_before = front_process.cpu_times()
            switches_before = sleeps(front_pid)
    cpu_after = front_process.cpu_times()
    switches = sleeps(front_pid) - switches_before
    heard.close()
    user = cpu_after.user - cpu_before.user
    system = cpu_after.system - cpu_before.system
    print(
        f"front CPU per request: {user / SAMPLES * 1000:.2f} ms user"
        f" + {system / SAMPLES * 1000:.2f} ms system;"
        f" {switches / SAMPLES:.1f} sleeps (voluntary context switches)"
    )
    return direct, through, (user + system) / SAMPLES


class Delivery(NamedTuple):
    """One delivery sample's moments (time.perf_counter): the worker sent its submit, the
    bench's own pattern subscriber saw the first event published, the worker had the submit's
    response, the client had the reply."""

    sent: float
    published: float
    returned: float
    arrived: float

    @property
    def total(self) -> float:
        return self.arrived - self.sent


class Published(threading.Thread):
    """Notes when each chat event reaches a pattern subscriber of the bench's own."""

    def __init__(self, redis: Redis) -> None:
        super().__init__(name="bench-published", daemon=True)
        self.pubsub = redis.pubsub(ignore_subscribe_messages=True)
        self.pubsub.psubscribe(ALL_CHANNELS)
        self.seen: list[float] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            if self.pubsub.get_message(timeout=0.1) is not None:
                self.seen.append(time.perf_counter())

    def first_after(self, moment: float) -> float:
        """When the first event after ``moment`` arrived (waiting for it: on a loaded machine
        this thread may read it after the front answered)."""
        until(lambda: any(t >= moment for t in self.seen), TIMEOUT, "the published event")
        return next(t for t in self.seen if t >= moment)

    def __enter__(self) -> Published:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.join(timeout=5)
        self.pubsub.close()


def submit_to_reply(
    front: httpx.Client, front_url: str, worker: BenchWorker, redis: Redis
) -> list[Delivery]:
    samples: list[Delivery] = []
    with Published(redis) as published:
        for _ in range(SAMPLES):
            until(lambda: not open_wait_count(front_url), TIMEOUT, "the last wait's end", POLL)
            worker.want()
            front_request(front)
            arrived = time.perf_counter()
            sent = worker.submit_started[-1]
            until(
                lambda: len(worker.submit_returned) == len(worker.submit_started),
                TIMEOUT,
                "the submit's response",
            )
            samples.append(
                Delivery(sent, published.first_after(sent), worker.submit_returned[-1], arrived)
            )
    return samples


def hold_until_waiting(front_url: str) -> Callable[[dict[str, Any]], None]:
    def hold(job: dict[str, Any]) -> None:
        until(lambda: open_wait_count(front_url), TIMEOUT, "the front's wait", POLL)
        time.sleep(SETTLE)

    return hold


class KeepOnline(threading.Thread):
    """Refreshes every worker's check-in until stopped (the bench's one worker)."""

    def __init__(self, native_api: NativeProcess) -> None:
        super().__init__(name="bench-keep-online", daemon=True)
        self.engine = native_api.engine
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(CHECK_IN_EVERY):
            with self.engine.begin() as connection:
                connection.execute(text("UPDATE workers SET last_check_in = now()"))

    def __enter__(self) -> KeepOnline:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.join(timeout=30)


def open_waits(front: str, key: str, worker: BenchWorker, redis: Redis, pid: int) -> Memory:
    front_process = psutil.Process(pid)
    idle = front_process.memory_info().rss
    spawn = multiprocessing.get_context("spawn")
    results: Any = spawn.Queue()
    url = f"{front}/v1/chat/completions"
    args = (url, key, BODY, WAITS, OPEN_TIMEOUT, results)
    client = spawn.Process(target=hold_open_waits, args=args, name="bench-waits", daemon=True)
    started = time.perf_counter()
    client.start()
    try:
        until(
            lambda: not client.is_alive() or open_wait_count(front) >= WAITS,
            OPEN_TIMEOUT,
            "every wait to open",
            step=0.2,
        )
        if not client.is_alive():
            raise RuntimeError(f"the waiting client ended early: {results.get(timeout=5)}")
        opened = time.perf_counter() - started
        waiting = settled_rss(front_process)
        print_memory_figure(idle, waiting)
        released = time.perf_counter()
        worker.want(WAITS)
        statuses = results.get(timeout=OPEN_TIMEOUT)
        drained = time.perf_counter() - released
    finally:
        client.join(timeout=30)
        if client.is_alive():
            client.kill()
            client.join(timeout=10)
    if not isinstance(statuses, list) or set(statuses) != {200}:
        raise RuntimeError(f"not every wait was answered with 200: {statuses!r:.300}")
    return Memory(idle, waiting, opened, drained)


def settled_rss(process: psutil.Process) -> int:
    """The RSS once it stopped growing (the last first status reads), at most 20 s."""
    rss = process.memory_info().rss
    for _ in range(40):
        time.sleep(0.5)
        now = process.memory_info().rss
        if abs(now - rss) < rss * 0.002:
            return now
        rss = now
    return rss


def print_latency(
    direct: list[float], through: list[float], cpu: float, samples: list[Delivery]
) -> None:
    delays = [d.total for d in samples]
    cpus = os.cpu_count()
    print(f"chat front on the real stack ({SAMPLES} samples per leg, loopback, {cpus} CPUs)")
    print(f"{'':48} {'p50 ms':>9} {'p99 ms':>9}")
    added = [pct(through, p) - pct(direct, p) for p in (50, 99)]
    rows = [
        ("native direct: submit, its signal, outcome read", pct(direct, 50), pct(direct, 99)),
        ("through the front: POST /v1/chat/completions", pct(through, 50), pct(through, 99)),
        ("front added latency (front - direct)", added[0], added[1]),
        ("worker submit sent -> client has the reply", pct(delays, 50), pct(delays, 99)),
    ]
    for label, p50, p99 in rows:
        print(f"{label:48} {p50:9.2f} {p99:9.2f}", flush=True)
    print(f"figure: front_added_p50_ms = {added[0]:.2f} ms")
    print(f"figure: front_added_p99_ms = {added[1]:.2f} ms")
    print(f"figure: delivery_p50_ms = {pct(delays, 50):.2f} ms")
    print(f"figure: delivery_p99_ms = {pct(delays, 99):.2f} ms")
    print(f"figure: front_cpu_per_request_ms = {cpu * 1000:.2f} ms", flush=True)
    print_delivery_breakdown(samples)


def print_delivery_breakdown(samples: list[Delivery]) -> None:
    """Where a delivery's time went: the native API's submit until its event reached a
    subscriber, from there to the client holding the reply (the front's wake, outcome read
    and answer), and the submit's own response; for the slowest samples and the median."""
    parts = [
        ("submit sent -> event published", lambda d: d.published - d.sent),
        ("event published -> client has reply", lambda d: d.arrived - d.published),
        ("submit sent -> submit answered", lambda d: d.returned - d.sent),
    ]
    print(f"{'delivery, by part':48} {'p50 ms':>9} {'p99 ms':>9}")
    for label, part in parts:
        values = [part(d) for d in samples]
        print(f"{label:48} {pct(values, 50):9.2f} {pct(values, 99):9.2f}")
    slowest = sorted(samples, key=lambda d: d.total)[-5:]
    print("slowest deliveries (ms): total = submit->published + published->reply; submit answered")
    for d in slowest:
        print(
            f"  {d.total * 1000:8.2f} = {(d.published - d.sent) * 1000:8.2f}"
            f" + {(d.arrived - d.published) * 1000:8.2f}; {(d.returned - d.sent) * 1000:8.2f}"
        )
    sys.stdout.flush()


def print_memory_figure(idle: int, waiting: int) -> None:
    """Printed once measured, before the drain (on a loaded machine one worker answering
    10,000 queued requests takes long)."""
    per_wait = (waiting - idle) / WAITS / 1024
    print(f"memory per open wait ({WAITS} concurrent waits, one front process): {per_wait:.1f} KiB")
    print(f"figure: wait_memory_kib = {per_wait:.1f} KiB")
    print(f"figure: waits = {WAITS} waits", flush=True)


def print_memory(memory: Memory) -> None:
    mib = 1024 * 1024
    print(
        f"  front RSS {memory.idle / mib:.1f} MiB idle -> {memory.waiting / mib:.1f} MiB waiting;"
        f" all open {memory.opened:.1f} s after the client started;"
        f" all answered by the one worker in {memory.drained:.1f} s"
    )


def main() -> None:
    print_host_figures()  # how fast the machine is at the start (bench/support/host.py)
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # busy threads, as expected
    with native_process() as native_api:
        requester, owner = bench_users(native_api.sessions)
        redis = native_api.redis
        redis_url = native_api.redis_url
        process, front_url = start_front(redis_url, native_api.url, cap=WAITS * 2, poll=60)
        try:
            native = httpx.Client(
                base_url=f"{native_api.url}/api/v2", headers={"apikey": requester}, timeout=TIMEOUT
            )
            front = httpx.Client(
                base_url=f"{front_url}/v1",
                headers={"Authorization": f"Bearer {requester}"},
                timeout=TIMEOUT,
            )
            with native, front, BenchWorker(native_api.url, owner, MODEL) as worker:
                direct, through, cpu = added_latency(native, front, worker, redis, process.pid)
                worker.hold = hold_until_waiting(front_url)
                delays = submit_to_reply(front, front_url, worker, redis)
                worker.hold = None
                print_latency(direct, through, cpu, delays)
                with KeepOnline(native_api):
                    memory = open_waits(front_url, requester, worker, redis, process.pid)
                print_memory(memory)
            if worker.errors:
                raise RuntimeError(f"the worker failed: {worker.errors[:3]}")
        finally:
            stop_front(process)


if __name__ == "__main__":
    main()
