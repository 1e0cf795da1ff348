"""The worker's client CPU a JSON call: httpx beside ``runtime.worker.json_http``, side by side
in one run. Printed, never pass/fail.

A plain job's pop, backend completion and submit are each one call on its completion's
critical path. Here both clients POST a pop-sized body, one call at a time, to the same bare
upstream (bench/hop_floor.py's, uvicorn in a process of its own) in alternating rounds; this
process's CPU a call is the client's. Figures: ``worker_http_httpx_cpu_per_call_us``,
``worker_http_json_http_cpu_per_call_us`` and their ratio. docs/performance.md has what it
measured.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.hop_floor import start
from bench.support.host import print_host_figures
from runtime.worker.json_http import JsonHttp

CALLS = int(os.environ.get("BENCH_WORKER_HTTP_CALLS", "2000"))
ROUNDS = 3
WARMUP = 100
POP = {
    "name": "bench-worker",
    "models": ["bench-model"],
    "max_length": 512,
    "max_context_length": 4096,
    "wait": 0,
    "chat": {"model_id": "bench-model", "features": ["tools", "json_schema"]},
}
HEADERS = {"apikey": "0" * 22, "Client-Agent": "horde-chat-worker:1:bench"}


def cpu_per_call_us(call: Callable[[], object]) -> float:
    started = time.process_time()
    for _ in range(CALLS):
        call()
    return (time.process_time() - started) * 1e6 / CALLS


def main() -> None:
    print_host_figures()
    upstream, url = start(None)
    plain = httpx.Client(base_url=url, headers=HEADERS, timeout=30)
    light = JsonHttp(url.rstrip("/"), headers=HEADERS, timeout=30)

    def by_httpx() -> object:
        return plain.post("/", json=POP).raise_for_status().json()

    def by_json_http() -> object:
        answer = light.request("POST", "/", POP)
        answer.raise_for_status()
        return answer.json()

    try:
        for _ in range(WARMUP):
            by_httpx()
            by_json_http()
        spent: dict[str, list[float]] = {"httpx": [], "json_http": []}
        for _ in range(ROUNDS):  # alternating, so a change in the machine's load hits both
            spent["httpx"].append(cpu_per_call_us(by_httpx))
            spent["json_http"].append(cpu_per_call_us(by_json_http))
    finally:
        plain.close()
        light.close()
        upstream.terminate()
    least = {name: min(values) for name, values in spent.items()}
    print(f"client CPU a JSON call, the least of {ROUNDS} rounds of {CALLS} calls")
    print(f"figure: worker_http_httpx_cpu_per_call_us = {least['httpx']:.0f} us")
    print(f"figure: worker_http_json_http_cpu_per_call_us = {least['json_http']:.0f} us")
    ratio = least["httpx"] / least["json_http"]
    print(f"figure: worker_http_httpx_over_json_http = {ratio:.2f}", flush=True)


if __name__ == "__main__":
    main()
