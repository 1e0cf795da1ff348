"""Hostile bodies sent to the chat front while other clients' small requests run.

The real front runs as its own process (``python -m runtime.front``, a fresh one per body so
each peak RSS is its own) beside the native API on the embedded stores. CLIENTS other
clients each send a small request the front reads, validates and refuses 400 (the native API
is not called), 1 s after its last answer; after two baseline seconds a hostile body
(``BODIES``) is sent on its own connection, REPEATS times. Printed, never pass/fail. Per body:
``front_stall_ms_<body>`` (the slowest overlapping request of the others minus their
baseline median; the median of the sends), ``front_rss_growth_mb_<body>`` (the front's peak
RSS after it minus its RSS before) and ``front_parsers_peak_rss_mb_<body>``. ``flood_40kib``
is a flood instead: one address sends 40 KiB bodies back to back on FLOOD_CONNECTIONS
connections while another sends one a second; ``front_parse_wait_ms_<baseline|flooded>`` is
the median time the other's body took, ``front_parse_wait_max_ms_flooded`` the slowest.
Run: ``.venv/bin/python bench/front_hostile.py [NAME ...]`` (default: every body, then the
flood); docs/performance.md has the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.front_stack import start_front, stop_front
from bench.native_stack import native_service

CLIENTS = int(os.environ.get("BENCH_HOSTILE_CLIENTS", "50"))
BASELINE = 2.0
"""Seconds of the other clients' requests before the hostile body is sent."""
AFTER = 0.5
"""Seconds the other clients go on after each hostile body was answered."""
REPEATS = 3
"""Sends of each hostile body (one after the other); its stall is their median (the
machine is shared: one send can meet another process's burst)."""
PAUSE = 1.0
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


def images_body(size: int) -> bytes:
    """Two inline images of ``size`` bytes of data URL each, and a dry run."""
    url = "data:image/png;base64," + "A" * (size - 22)
    part: dict[str, Any] = {"type": "image_url", "image_url": {"url": url}}
    content: list[dict[str, Any]] = [{"type": "text", "text": "Look"}, part, part]
    messages = [{"role": "user", "content": content}]
    body = {"model": "bench-hostile", "horde": {"dry_run": True}, "messages": messages}
    return json.dumps(body, separators=(",", ":")).encode()


# The hostile bodies: ``parts_8mb``, one user message of ~8.5 MB of one-character text parts;
# ``tool_history_2mb``, an assistant message with many tool calls answered in reverse order;
# ``array_30mb``, a top-level array of ``{}``; ``deep_10000``, 10,000 nested arrays;
# ``schema_900``, a json_schema 900 levels deep; and the largest bodies the allowances let
# through to the parse (bodies over 16 KiB are parsed in the front's parser processes,
# runtime/front/admission.py): ``array_1mb`` (1 MiB of ``{}``, the text allowance) and
# ``images_24mb`` (two inline images of 12 MiB, the inline-image allowance). The chat bodies
# ask for ``horde.dry_run``, so the front refuses them after validation.
BODIES: dict[str, Callable[[], bytes]] = {
    "parts_8mb": lambda: parts_body(int(8.5 * MB)),
    "tool_history_2mb": lambda: tool_history_body(2 * MB),
    "array_30mb": lambda: array_body(30 * MB),
    "deep_10000": lambda: deep_body(10_000),
    "schema_900": lambda: schema_body(900),
    "array_1mb": lambda: array_body(MB - 16),
    "images_24mb": lambda: images_body(12 * MB - 4096),
}


def rss(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for {pid}")


SENDER = r"""
import sys, time, httpx
url, path = sys.argv[1], sys.argv[2]
body = open(path, "rb").read()
with httpx.Client(timeout=600) as client:
    started = time.monotonic()
    try:
        response = client.post(url, content=body, headers={"content-type": "application/json"})
        status, text = response.status_code, response.text[:160]
    except httpx.HTTPError as exc:
        status, text = 0, repr(exc)
    ended = time.monotonic()
print(started, ended, status, " ".join(text.split()), sep="\t")
"""
"""Sends one body (a file) on its own connection from a process of its own: from a thread of
this one it held the GIL the other clients' loop needs (a 30 MB body the front refuses from
its Content-Length alone then 'stalled the front' ~50 ms)."""


class Hostile:
    """One send of the body in ``path``; when it went (time.monotonic, shared by the
    processes of the machine) and how it was answered."""

    def __init__(self, url: str, path: Path) -> None:
        self.url, self.path = url, path
        self.started = self.ended = 0.0
        self.status = 0
        self.error = ""

    def run(self) -> None:
        done = subprocess.run(
            [sys.executable, "-c", SENDER, self.url, str(self.path)],
            capture_output=True,
            text=True,
            check=True,
        )
        started, ended, status, self.error = done.stdout.rstrip("\n").split("\t", 3)
        self.started, self.ended, self.status = float(started), float(ended), int(status)


async def others(url: str, stop: asyncio.Event) -> list[tuple[float, float]]:
    """(start, end) of every small request of CLIENTS clients until ``stop``: each on its own
    keep-alive connection, written and read with asyncio streams (an httpx client of 50
    connections on one loop was itself slower than the front), starting at a random point
    of its first pause so the clients do not come together."""
    clients = [timed_posts(url, SMALL, stop, PAUSE, jitter=True) for _ in range(CLIENTS)]
    return [timing for timings in await asyncio.gather(*clients) for timing in timings]


async def timed_posts(
    url: str,
    body: bytes,
    stop: asyncio.Event,
    pause: float,
    *,
    source: str | None = None,
    jitter: bool = False,
) -> list[tuple[float, float]]:
    """(start, end) of each POST of ``body`` until ``stop``, on one keep-alive connection
    (from ``source``, when given), ``pause`` seconds apart (after a random part of one first,
    with ``jitter``); each must be answered 400 (refused after validation)."""
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    path = "/" + url.removeprefix("http://").split("/", 1)[1]
    request = (
        f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body
    local = (source, 0) if source is not None else None
    reader, writer = await asyncio.open_connection(host, int(port), local_addr=local)
    if jitter:
        await asyncio.sleep(random.uniform(0, pause))
    timings: list[tuple[float, float]] = []
    try:
        while not stop.is_set():
            start = time.monotonic()
            writer.write(request)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            status = head.split(b" ", 2)[1]
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            if status != b"400":
                raise RuntimeError(f"a request was answered {status!r}")
            timings.append((start, time.monotonic()))
            if pause:
                await asyncio.sleep(pause)
    finally:
        writer.close()
    return timings


def descendants(pid: int) -> list[int]:
    """The processes started by ``pid`` and by them (the front's parser processes)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def peak_rss(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, RuntimeError):  # gone
            total += rss(pid, "VmHWM")
    return total


async def measure(url: str, body: bytes, pid: int) -> tuple[float, float, float, int, float, str]:
    """(stall ms: the median over REPEATS sends, front RSS growth MB, the peak RSS MB of the
    front's parser processes, status, seconds, answer)."""
    stop = asyncio.Event()
    running = asyncio.create_task(others(url, stop))
    with tempfile.NamedTemporaryFile(suffix=".json") as file:
        file.write(body)
        file.flush()
        await asyncio.sleep(BASELINE)
        before = rss(pid, "VmRSS")
        sends: list[Hostile] = []
        for _ in range(REPEATS):
            hostile = Hostile(url, Path(file.name))
            await asyncio.to_thread(hostile.run)
            sends.append(hostile)
            await asyncio.sleep(AFTER)
    stop.set()
    timings = await running
    peak = rss(pid, "VmHWM")
    parsers = peak_rss(descendants(pid))
    first = sends[0].started
    median = statistics.median(e - s for s, e in timings if e < first)
    stalls = []
    for sent in sends:
        overlapping = [e - s for s, e in timings if e > sent.started and s < sent.ended]
        stalls.append(max(overlapping, default=median) - median)
    print(
        f"  others: median {median * 1000:.1f} ms before the first send; each send's slowest"
        f" overlapping request over that median: {', '.join(f'{x * 1000:.1f}' for x in stalls)} ms",
        flush=True,
    )
    took = statistics.median(h.ended - h.started for h in sends)
    stall = statistics.median(stalls)
    return stall * 1000, (peak - before) / MB, parsers / MB, sends[0].status, took, sends[0].error


FLOOD = "flood_40kib"
FLOOD_CONNECTIONS = 60
"""Below the front's shipped per-source cap (64): a flood one client may send."""
FLOOD_SECONDS = 15.0
FLOODER, OTHER = "127.0.0.2", "127.0.0.3"


async def parse_waits(url: str) -> tuple[list[float], list[float]]:
    """Seconds the other address's bodies took alone, then during one address's flood."""
    body = parts_body(40 * 1024 - 200)
    stop = asyncio.Event()
    other = asyncio.create_task(timed_posts(url, body, stop, PAUSE, source=OTHER))
    await asyncio.sleep(FLOOD_SECONDS / 3)
    stop.set()
    alone = await other
    stop = asyncio.Event()
    flood = [
        asyncio.create_task(timed_posts(url, body, stop, 0.0, source=FLOODER))
        for _ in range(FLOOD_CONNECTIONS)
    ]
    await asyncio.sleep(BASELINE)
    other = asyncio.create_task(timed_posts(url, body, stop, PAUSE, source=OTHER))
    await asyncio.sleep(FLOOD_SECONDS)
    stop.set()
    flooded = await other
    await asyncio.gather(*flood)
    return [e - s for s, e in alone], [e - s for s, e in flooded]


def flood_figures(redis_url: str, native_url: str) -> None:
    process, front_url = start_front(redis_url, native_url, cap=CLIENTS * 4, poll=10)
    try:
        alone, flooded = asyncio.run(parse_waits(f"{front_url}/v1/chat/completions"))
    finally:
        stop_front(process)
    median_alone, median_flooded = statistics.median(alone), statistics.median(flooded)
    print(f"{FLOOD}: {len(flooded)} of the other address's bodies during the flood", flush=True)
    print(f"figure: front_parse_wait_ms_baseline = {median_alone * 1000:.1f} ms", flush=True)
    print(f"figure: front_parse_wait_ms_flooded = {median_flooded * 1000:.1f} ms", flush=True)
    print(f"figure: front_parse_wait_max_ms_flooded = {max(flooded) * 1000:.1f} ms", flush=True)


def main() -> None:
    chosen = sys.argv[1:] or [*BODIES, FLOOD]
    with native_service() as service:
        redis_url = str(service.context.settings.redis_url)
        for name in chosen:
            if name == FLOOD:
                flood_figures(redis_url, service.url)
                continue
            body = BODIES[name]()
            process, front_url = start_front(redis_url, service.url, cap=CLIENTS * 4, poll=10)
            try:
                url = f"{front_url}/v1/chat/completions"
                measured = asyncio.run(measure(url, body, process.pid))
                stall, growth, parsers, status, took, error = measured
            finally:
                stop_front(process)
            print(
                f"{name}: {len(body) / MB:.1f} MB answered {status} in {took * 1000:.0f} ms"
                f" ({error[:120]!r})",
                flush=True,
            )
            print(f"figure: front_stall_ms_{name} = {stall:.1f} ms", flush=True)
            print(f"figure: front_rss_growth_mb_{name} = {growth:.1f} MB", flush=True)
            print(f"figure: front_parsers_peak_rss_mb_{name} = {parsers:.1f} MB", flush=True)


if __name__ == "__main__":
    main()
