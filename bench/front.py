"""The chat front's figures, side by side in one run (printed, never pass/fail).

1. Added latency: a request through the front (POST /v1/chat/completions) against the two
   native calls a direct client makes (POST chat async, GET chat status), both served by the
   same native double that answers at once, so the difference is the front's own cost
   (admission, validation, operation key, signal subscription, status read, response).
2. Submit-to-reply: the delay from a worker's submit (the double stores the reply and
   publishes the completion signal) to the client holding the reply.
3. Memory per open wait: the front's RSS (a separate process) with WAITS requests waiting
   at once, over its RSS when idle; then how long all of them take to be answered once
   their replies land (signals only: the fallback poll is set to 60 s).

The native side is tests/doubles/native_chat_double.py (a real HTTP server and real Redis
pub/sub) so the figures are the front's, not Postgres'.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from generated.signals import chat_channel  # noqa: E402
from runtime.stores.embedded_redis import EmbeddedRedis  # noqa: E402
from tests.doubles.native_chat_double import NativeChatDouble  # noqa: E402

SAMPLES = 300
WAITS = int(os.environ.get("BENCH_FRONT_WAITS", "3000"))
BODY = {"model": "double-model", "messages": [{"role": "user", "content": "Say hello"}]}
GENERATION = {
    "worker_id": "w1",
    "worker_name": "bench",
    "model": "double-model",
    "state": "ok",
    "content": "Hello.",
    "tool_calls": [],
    "finish_reason": "stop",
    "kudos": 1.0,
    "charge_basis": "output_estimate",
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "reasoning_tokens": None},
}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1000


def start_front(redis_url: str, native_root: str) -> tuple[subprocess.Popen[str], str]:
    env = {
        **os.environ,
        "HORDE_REDIS_URL": redis_url,
        "HORDE_FRONT_NATIVE_ROOTS": native_root,
        "HORDE_FRONT_PORT": "0",
        "HORDE_FRONT_PER_SOURCE": str(WAITS * 2),
        "HORDE_FRONT_GLOBAL": str(WAITS * 2),
        "HORDE_FRONT_POLL": "60",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "runtime.front"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("chat front: "):
        process.kill()
        raise RuntimeError(f"the front did not start: {line!r}")
    return process, line.removeprefix("chat front: ").removesuffix("/v1")


def added_latency(native: NativeChatDouble, front: str) -> tuple[list[float], list[float]]:
    native.initial = {"done": True, "finished": 1, "waiting": 0, "generations": [GENERATION]}
    direct: list[float] = []
    through: list[float] = []
    with httpx.Client(timeout=30) as client:
        for i in range(SAMPLES + 20):
            t0 = time.perf_counter()
            accepted = client.post(
                native.root + "/api/v2/generate/chat/async",
                json=BODY,
                headers={"apikey": "k", "X-Operation-Key": f"direct-{i}"},
            ).json()
            client.get(native.root + f"/api/v2/generate/chat/status/{accepted['id']}").json()
            t1 = time.perf_counter()
            response = client.post(front + "/v1/chat/completions", json=BODY)
            t2 = time.perf_counter()
            assert response.status_code == 200, response.text
            if i >= 20:  # warm-up
                direct.append(t1 - t0)
                through.append(t2 - t1)
    native.initial = {}
    return direct, through


def submit_to_reply(native: NativeChatDouble, front: str) -> list[float]:
    delays: list[float] = []
    with httpx.Client(timeout=30) as client:
        for _ in range(SAMPLES):
            arrived: dict[str, float] = {}

            def call(into: dict[str, float] = arrived) -> None:
                client.post(front + "/v1/chat/completions", json=BODY).raise_for_status()
                into["t"] = time.perf_counter()

            expected = sum(1 for s in native.submits if s.created) + 1
            thread = threading.Thread(target=call)
            thread.start()
            request_id = native.wait_for_submit(count=expected)
            native.wait_for_read(request_id)
            t0 = time.perf_counter()
            native.finish(request_id)
            thread.join()
            delays.append(arrived["t"] - t0)
    return delays


async def open_waits(
    native: NativeChatDouble, front: str, process: psutil.Process
) -> tuple[float, float]:
    limits = httpx.Limits(max_connections=WAITS + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        idle = process.memory_info().rss
        before = len(native.request_ids())
        tasks = [asyncio.create_task(client.post(front + "/v1/chat/completions", json=BODY))]
        tasks += [
            asyncio.create_task(client.post(front + "/v1/chat/completions", json=BODY))
            for _ in range(WAITS - 1)
        ]
        while native.read_count() < before + WAITS:  # every request is waiting now
            await asyncio.sleep(0.2)
        waiting = process.memory_info().rss
        released = time.perf_counter()
        for rid in native.request_ids()[before:]:
            native.finish(rid)
        responses = await asyncio.gather(*tasks)
        drained = time.perf_counter() - released
        assert all(r.status_code == 200 for r in responses)
    return (waiting - idle) / WAITS, drained


def main() -> None:
    sys.setswitchinterval(0.0002)  # the double and the client threads share this process
    data = Path(tempfile.mkdtemp(prefix="bench-front-"))
    redis = EmbeddedRedis.start(data / "redis")
    process = None
    try:
        with NativeChatDouble(redis.url, chat_channel) as native:
            process, front = start_front(redis.url, native.root)
            direct, through = added_latency(native, front)
            delays = submit_to_reply(native, front)
            per_wait, drained = asyncio.run(open_waits(native, front, psutil.Process(process.pid)))
            added = [t - d for t, d in zip(through, direct, strict=True)]
            rows: list[tuple[str, Any, Any]] = [
                ("native direct (async + status), ms", pct(direct, 50), pct(direct, 99)),
                ("through the front, ms", pct(through, 50), pct(through, 99)),
                ("front added latency, ms", pct(added, 50), pct(added, 99)),
                ("worker submit -> client reply, ms", pct(delays, 50), pct(delays, 99)),
            ]
            print(f"chat front ({SAMPLES} sequential samples each; native = scripted double)")
            print(f"{'':40} {'p50':>9} {'p99':>9}")
            for label, p50, p99 in rows:
                print(f"{label:40} {p50:9.2f} {p99:9.2f}")
            ratio = statistics.median(through) / statistics.median(direct)
            print(f"ratio front/direct (p50): {ratio:.2f}")
            print(f"memory per open wait ({WAITS} concurrent waits): {per_wait / 1024:.1f} KiB")
            print(f"{WAITS} waits answered by their signals (poll 60 s) in {drained:.2f} s")
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=20)
        redis.stop()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
