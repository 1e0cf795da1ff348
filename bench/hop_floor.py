"""The floor under the front's added latency: what one bare HTTP hop costs on this machine,
with nothing of ours in it. Printed, never pass/fail.

bench/front.py's added latency includes one hop: uvicorn serves the client's request and
aiohttp sends it on. Here an upstream (uvicorn with httptools, a bare ASGI app answering every
POST with JSON as large as a chat submit's answer) and a proxy (the same, POSTing each body
to the upstream over an aiohttp session made as the front's, ``native_session``, with no
framework, validation, log line or metric) run each in a process of its own, on sockets bound
as the front's (``runtime.listening.bind``). This process's httpx client sends WARMUP
requests, then SAMPLES to each server in turn, one at a time. Figures:
``hop_floor_direct_p50_ms``, ``hop_floor_added_p50_ms`` and ``hop_floor_added_p99_ms`` (the
proxied percentile minus the direct one), ``hop_floor_cpu_per_request_ms`` (the proxy's CPU a
request), beside bench/support/host.py's. Run: ``.venv/bin/python bench/hop_floor.py``;
docs/performance.md has what it measured.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import httpx
import psutil
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.support.figures import percentile as pct
from bench.support.host import print_host_figures
from runtime.front.native_client import native_session
from runtime.listening import bind

SAMPLES = int(os.environ.get("BENCH_HOP_SAMPLES", "1000"))
WARMUP = 100
HOST = "127.0.0.1"
ANSWER = (
    b'{"id":"0b6cbb1f-5f5e-4d7e-9a51-0c7e3b1f9d42","kudos":12.0,"status":{"finished":0,'
    b'"processing":0,"restarted":0,"waiting":1,"done":false,"faulted":false,"wait_time":0,'
    b'"queue_position":0,"kudos":0.0,"is_possible":true,"generations":[]},"warnings":[]}\n'
)
"""The upstream's answer: the size and shape of a chat submit's (the id, the first status)."""
BODY = {"model": "bench-hop", "messages": [{"role": "user", "content": "Say hello"}]}
JSON_HEAD = [(b"content-type", b"application/json")]


async def _body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _answer(send: Any, body: bytes) -> None:
    head = [*JSON_HEAD, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": head})
    await send({"type": "http.response.body", "body": body})


class Upstream:
    """Answers every request with ANSWER."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await _body(receive)
        await _answer(send, ANSWER)


class Proxy:
    """Sends every request's body on to the upstream and answers with the upstream's body."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.session: Any = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if self.session is None:  # on the server's loop, at the first (warm-up) request
            self.session = native_session()
        body = await _body(receive)
        headers = {"content-type": "application/json"}
        async with self.session.post(self.upstream, data=body, headers=headers) as answer:
            await _answer(send, await answer.read())


def serve(upstream: str | None, ready: Queue[int]) -> None:
    """The server process: the upstream (``upstream`` None) or the proxy in front of it."""
    sock = bind(HOST, 0)
    ready.put(sock.getsockname()[1])
    app = Upstream() if upstream is None else Proxy(upstream)
    config = uvicorn.Config(app, lifespan="off", http="httptools", log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


def start(upstream: str | None) -> tuple[multiprocessing.process.BaseProcess, str]:
    context = multiprocessing.get_context("spawn")
    ready: Queue[int] = context.Queue()
    process = context.Process(target=serve, args=(upstream, ready), daemon=True)
    process.start()
    url = f"http://{HOST}:{ready.get(timeout=60)}/"
    for _ in range(600):  # until it answers
        try:
            httpx.post(url, json=BODY, timeout=1).raise_for_status()
            return process, url
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} never answered")


def timed(client: httpx.Client) -> float:
    started = time.perf_counter()
    client.post("", json=BODY).raise_for_status()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    print_host_figures()
    upstream, upstream_url = start(None)
    proxy, proxy_url = start(upstream_url)
    try:
        direct_client = httpx.Client(base_url=upstream_url, timeout=30)
        proxy_client = httpx.Client(base_url=proxy_url, timeout=30)
        with direct_client, proxy_client:
            for _ in range(WARMUP):
                timed(direct_client)
                timed(proxy_client)
            assert proxy.pid is not None
            proxy_cpu = psutil.Process(proxy.pid)
            before = proxy_cpu.cpu_times()
            direct, proxied = [], []
            for _ in range(SAMPLES):
                direct.append(timed(direct_client))
                proxied.append(timed(proxy_client))
            after = proxy_cpu.cpu_times()
    finally:
        for process in (proxy, upstream):
            process.terminate()
            process.join(10)
    cpu_ms = (after.user - before.user + after.system - before.system) * 1000 / SAMPLES
    print(f"one bare HTTP hop on this machine ({SAMPLES} requests each, loopback)")
    print(f"{'':32}{'p50 ms':>10}{'p99 ms':>10}")
    print(f"{'client -> upstream':32}{pct(direct, 50):10.2f}{pct(direct, 99):10.2f}")
    print(f"{'client -> proxy -> upstream':32}{pct(proxied, 50):10.2f}{pct(proxied, 99):10.2f}")
    print(f"figure: hop_floor_direct_p50_ms = {pct(direct, 50):.2f} ms")
    print(f"figure: hop_floor_added_p50_ms = {pct(proxied, 50) - pct(direct, 50):.2f} ms")
    print(f"figure: hop_floor_added_p99_ms = {pct(proxied, 99) - pct(direct, 99):.2f} ms")
    print(f"figure: hop_floor_cpu_per_request_ms = {cpu_ms:.2f} ms")


if __name__ == "__main__":
    main()
