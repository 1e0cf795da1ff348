"""Hostile bodies sent to the chat front while other clients' small requests run (issue 13).

Printed figures, never pass/fail. The real front runs as its own process (``python -m
runtime.front``, a fresh one per body so each peak RSS is its own) beside the native API on
the embedded stores (bench/native_stack.py). CLIENTS other clients each send a small request
(a body the front refuses 400 after reading and validating it: admission, body read, parse
and validation all run, the native API is not called) each 0.5 s after its last answer. After a
baseline second, one hostile body is sent on its own connection from a thread; the figures
per body:

- ``front_stall_ms_<body>``: the slowest of the other clients' requests that overlapped the
  hostile one, minus their median in the baseline (how long the others were held up);
- ``front_rss_growth_mb_<body>``: the front's peak RSS (VmHWM) after the body minus its RSS
  before it;
- the status the hostile body was answered with, and how long that took.

Bodies: ``parts_8mb`` (one user message of ~8.5 MB of one-character text parts, refused for
``horde.dry_run`` after validation), ``tool_history_2mb`` (an assistant message with many
tool calls answered in reverse order), ``array_30mb`` (a top-level array of ``{}``),
``deep_10000`` (10,000 nested arrays) and ``schema_900`` (a json_schema 900 levels deep).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.front_stack import start_front, stop_front
from bench.native_stack import native_service

CLIENTS = int(os.environ.get("BENCH_HOSTILE_CLIENTS", "50"))
BASELINE = 2.0
"""Seconds of the other clients' requests before the hostile body is sent."""
AFTER = 0.3
"""Seconds the other clients go on after the hostile body was answered."""
PAUSE = 0.5
SMALL = b'{"model":"bench-hostile","messages":"not a list"}'
MB = 1024 * 1024


def parts_body(size: int) -> bytes:
    part = b'{"type":"text","text":"x"},'
    count = size // len(part)
    head = b'{"model":"bench-hostile","horde":{"dry_run":true},"messages":[{"role":"user",'
    return head + b'"content":[' + part * count + b'{"type":"text","text":"x"}]}]}'


def tool_history_body(size: int) -> bytes:
    count = size // 130
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for i in range(count)
    ]
    answers = [
        {"role": "tool", "tool_call_id": f"c{i}", "content": "x"} for i in reversed(range(count))
    ]
    body = {
        "model": "bench-hostile",
        "horde": {"dry_run": True},
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            *answers,
        ],
    }
    return json.dumps(body, separators=(",", ":")).encode()


def array_body(size: int) -> bytes:
    return b"[" + b"{}," * (size // 3) + b"{}]"


def deep_body(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def schema_body(depth: int) -> bytes:
    schema = '{"type":"object","properties":{"a":' * depth + '{"type":"string"}' + "}}" * depth
    fmt = f'{{"type":"json_schema","json_schema":{{"name":"deep","schema":{schema}}}}}'
    head = '{"model":"bench-hostile","horde":{"dry_run":true},'
    return f'{head}"messages":[{{"role":"user","content":"hi"}}],"response_format":{fmt}}}'.encode()


BODIES: dict[str, Callable[[], bytes]] = {
    "parts_8mb": lambda: parts_body(int(8.5 * MB)),
    "tool_history_2mb": lambda: tool_history_body(2 * MB),
    "array_30mb": lambda: array_body(30 * MB),
    "deep_10000": lambda: deep_body(10_000),
    "schema_900": lambda: schema_body(900),
}


def rss(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for {pid}")


class Hostile(threading.Thread):
    """Sends one body on its own connection; records when it went and how it was answered."""

    def __init__(self, url: str, body: bytes) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.started = self.ended = 0.0
        self.status = 0
        self.error = ""

    def run(self) -> None:
        with httpx.Client(timeout=600) as client:
            self.started = time.perf_counter()
            try:
                response = client.post(
                    self.url, content=self.body, headers={"content-type": "application/json"}
                )
                self.status = response.status_code
                self.error = response.text[:160]
            except httpx.HTTPError as exc:
                self.error = repr(exc)
            self.ended = time.perf_counter()


async def others(url: str, stop: asyncio.Event) -> list[tuple[float, float]]:
    """(start, end) of every small request of CLIENTS clients until ``stop``."""
    timings: list[tuple[float, float]] = []
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(limits=limits, timeout=600) as client:

        async def one() -> None:
            while not stop.is_set():
                start = time.perf_counter()
                response = await client.post(url, content=SMALL, headers=headers)
                end = time.perf_counter()
                if response.status_code != 400:
                    raise RuntimeError(f"small request answered {response.status_code}")
                timings.append((start, end))
                await asyncio.sleep(PAUSE)

        await asyncio.gather(*(one() for _ in range(CLIENTS)))
    return timings


async def measure(url: str, body: bytes, pid: int) -> tuple[float, float, int, float, str]:
    stop = asyncio.Event()
    running = asyncio.create_task(others(url, stop))
    await asyncio.sleep(BASELINE)
    before = rss(pid, "VmRSS")
    hostile = Hostile(url, body)
    hostile.start()
    await asyncio.to_thread(hostile.join)
    await asyncio.sleep(AFTER)
    stop.set()
    timings = await running
    peak = rss(pid, "VmHWM")
    base = [e - s for s, e in timings if e < hostile.started]
    overlapping = [e - s for s, e in timings if e > hostile.started and s < hostile.ended]
    median = statistics.median(base)
    stall = max(overlapping, default=median) - median
    print(
        f"  others: {len(base)} baseline requests, median {median * 1000:.1f} ms;"
        f" {len(overlapping)} overlapping, slowest {stall * 1000 + median * 1000:.1f} ms",
        flush=True,
    )
    took = hostile.ended - hostile.started
    return stall * 1000, (peak - before) / MB, hostile.status, took, hostile.error


def main() -> None:
    chosen = sys.argv[1:] or list(BODIES)
    with native_service() as service:
        redis_url = str(service.context.settings.redis_url)
        for name in chosen:
            body = BODIES[name]()
            process, front_url = start_front(redis_url, service.url, cap=CLIENTS * 4, poll=10)
            try:
                url = f"{front_url}/v1/chat/completions"
                stall, growth, status, took, error = asyncio.run(measure(url, body, process.pid))
            finally:
                stop_front(process)
            print(
                f"{name}: {len(body) / MB:.1f} MB answered {status} in {took * 1000:.0f} ms"
                f" ({error[:120]!r})",
                flush=True,
            )
            print(f"figure: front_stall_ms_{name} = {stall:.1f} ms", flush=True)
            print(f"figure: front_rss_growth_mb_{name} = {growth:.1f} MB", flush=True)


if __name__ == "__main__":
    main()
