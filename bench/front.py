"""The chat front's figures on the real stack (printed, never pass/fail): the embedded stores,
the native API as its own process (bench/native_stack.py, no service passkey, so the front
forwards no client address), the front as its own (``python -m runtime.front``) and a worker
answering over the native pop/submit routes (bench/front_stack.py); loopback only.

1. Added latency: SAMPLES requests through the front (``POST /v1/chat/completions``) against
   the native submit called directly, its outcome heard as the front hears it (one pattern
   subscription, the outcome key read); same client, same worker: ``front_added_p50_ms``,
   ``front_added_p99_ms`` and ``front_cpu_per_request_ms`` (the front process's CPU a request).
2. Delivery, the worker's submit sent until the client holds the reply (each job held until
   the front's wait is open): ``delivery_p50_ms``, ``delivery_p99_ms``, and its parts.
3. Memory per open wait: WAITS requests held open by a child process, the front's RSS growth
   over WAITS: ``wait_memory_kib``; then every reply is checked.

Run: ``.venv/bin/python bench/front.py``; docs/performance.md has what it measured.
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
