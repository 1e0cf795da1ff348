"""Front requests per second for 1 and 2 front processes, printed, never pass/fail.

The stack: the embedded Postgres and Redis with the native API in this process
(bench/native_stack.py: rate limits off, since one client address and key would meet the
shipped 2 submits a second at once, and this measures throughput, not the limiter), WORKERS
worker threads here popping and submitting chat jobs back to back over the native HTTP
routes with a fixed short reply, and ``horde-chat front --processes N`` as its own processes
(N = 1, then 2) with its caps raised for the client's concurrency.

The client is a process of its own (asyncio, httpx): CONCURRENCY plain non-streamed chat
completions in flight at any time through the front, for WARMUP seconds uncounted and then
SECONDS counted; the figure is 200 answers per second. Everything shares the machine's cores
(2 here): the figure is what one box serves end to end, front, native API and workers
together, so the second process helps only as far as the front is the bottleneck.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.front_stack import REPLY, bench_users
from bench.native_stack import native_service
from generated.chat.names import DECL_CHAT_FEATURES, DECL_CHAT_JOBS, DECL_MODEL_ID
from generated.chat.tables import FEATURES, GUARANTEES

ROOT = Path(__file__).resolve().parents[1]
MODEL = "bench-processes"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello"}]}
CONCURRENCY = int(os.environ.get("BENCH_PROCESSES_CONCURRENCY", "48"))
WARMUP = float(os.environ.get("BENCH_PROCESSES_WARMUP", "3"))
SECONDS = float(os.environ.get("BENCH_PROCESSES_SECONDS", "15"))
WORKERS = int(os.environ.get("BENCH_PROCESSES_WORKERS", "4"))


class Worker(threading.Thread):
    """Pops and submits chat jobs back to back until stopped."""

    def __init__(self, native_url: str, api_key: str, index: int) -> None:
        super().__init__(daemon=True, name=f"bench-worker-{index}")
        self.client = httpx.Client(base_url=native_url, headers={"apikey": api_key}, timeout=30)
        self.name_ = "bench-processes"  # one worker, WORKERS threads (a new user may run few)
        self.stopping = threading.Event()
        self.answered = 0

    def run(self) -> None:
        body = {
            "name": self.name_,
            "models": [MODEL],
            "max_length": 512,
            "max_context_length": 4096,
            "threads": WORKERS,
            DECL_CHAT_JOBS: True,
            DECL_MODEL_ID: MODEL,
            DECL_CHAT_FEATURES: [*FEATURES, *GUARANTEES],
        }
        while not self.stopping.is_set():
            try:
                job = self.client.post("/generate/text/pop", json=body).json()
                if not job.get("id"):
                    self.stopping.wait(0.005)
                    continue
                self.client.post("/generate/text/submit", json={"id": job["id"], **REPLY})
                self.answered += 1
            except httpx.HTTPError:
                self.stopping.wait(0.05)
        self.client.close()


def start_front(
    processes: int, redis_url: str, native_root: str
) -> tuple[subprocess.Popen[str], str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HORDE_")},
        "HORDE_REDIS_URL": redis_url,
        "HORDE_FRONT_PER_SOURCE": str(CONCURRENCY * 4),
        "HORDE_FRONT_GLOBAL": str(CONCURRENCY * 4),
    }
    command = [sys.executable, "-m", "runtime.cli", "front", "--port", "0"]
    command += ["--processes", str(processes), "--native-roots", native_root]
    front = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert front.stdout is not None
    line = front.stdout.readline()
    found = re.search(r"chat front: (http://[\d.]+:\d+)/v1", line)
    if found is None:
        front.kill()
        raise RuntimeError(f"the front did not start: {line!r}")
    url = found.group(1)
    httpx.get(url + "/readyz", timeout=120).raise_for_status()
    return front, url


def client(url: str, api_key: str, results: Any) -> None:
    """The client process: answers per second over SECONDS, after WARMUP."""

    async def main() -> tuple[int, int]:
        limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
        headers = {"authorization": f"Bearer {api_key}"}
        async with httpx.AsyncClient(limits=limits, headers=headers, timeout=60) as http:
            loop = asyncio.get_running_loop()
            start = loop.time() + WARMUP
            end = start + SECONDS
            counted = [0, 0]  # answered, failed

            async def one_lane() -> None:
                while loop.time() < end:
                    response = await http.post(url + "/v1/chat/completions", json=BODY)
                    if loop.time() >= start and loop.time() < end:
                        counted[0 if response.status_code == 200 else 1] += 1

            await asyncio.gather(*(one_lane() for _ in range(CONCURRENCY)))
            return counted[0], counted[1]

    results.put(asyncio.run(main()))


def wakes(url: str) -> dict[str, float]:
    """How the front's waits woke (its /metrics, every process's): signal or poll."""
    found: dict[str, float] = {}
    text = httpx.get(url + "/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "horde_front_wait_wakes_total":
                found[sample.labels["by"]] = sample.value
    return found


def measure(processes: int, redis_url: str, native_root: str, api_key: str) -> tuple[float, int]:
    front, url = start_front(processes, redis_url, native_root)
    try:
        spawn = multiprocessing.get_context("spawn")
        results = spawn.Queue()
        child = spawn.Process(target=client, args=(url, api_key, results))
        child.start()
        answered, failed = results.get(timeout=WARMUP + SECONDS + 300)
        child.join(timeout=30)
        print(f"# {processes} process(es): waits woke by {wakes(url)}")
    finally:
        front.terminate()
        front.wait(timeout=60)
    return answered / SECONDS, failed


def main() -> None:
    with native_service() as service:
        requester, owner = bench_users(service.context.sessions)
        native_url = service.url + "/api/v2"
        workers = [Worker(native_url, owner, i) for i in range(WORKERS)]
        for worker in workers:
            worker.start()
        try:
            redis_url = service.context.settings.redis_url
            assert redis_url is not None
            one, failed_one = measure(1, redis_url, service.url, requester)
            two, failed_two = measure(2, redis_url, service.url, requester)
        finally:
            for worker in workers:
                worker.stopping.set()
            for worker in workers:
                worker.join(timeout=30)
    answered = sum(worker.answered for worker in workers)
    print(
        f"# jobs the workers answered: {answered}; {CONCURRENCY} in flight, "
        f"{SECONDS:g} s counted, {WORKERS} worker threads, "
        f"{os.cpu_count()} cores; failed: {failed_one} (1 process), {failed_two} (2)"
    )
    print(f"figure: front_requests_per_s = {one:.1f} requests/s")
    print(f"figure: front_requests_per_s_2proc = {two:.1f} requests/s")


if __name__ == "__main__":
    main()
