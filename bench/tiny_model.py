"""Demo model figures: build time, llama.cpp server start time, chat completion latency.

Prints figures only; nothing here passes or fails on time.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from runtime.worker.llama_server import LlamaServer
from runtime.worker.tiny_model import DEMO_REPLY, MODEL_NAME, build_tiny_model

BUILDS = 5
STARTS = 3
CALLS = 40
MESSAGES = [{"role": "user", "content": "Who are you?"}]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-tiny-model-") as folder:
        model = Path(folder) / "demo.gguf"
        builds = [_timed(lambda: build_tiny_model(model, rebuild=True)) for _ in range(BUILDS)]
        print(f"model build        median {_ms(statistics.median(builds))}  ({BUILDS} builds)")
        print(f"model size         {model.stat().st_size / 1024:8.1f} KiB")

        starts = []
        for _ in range(STARTS):
            server = LlamaServer(model, n_ctx=1024)
            starts.append(_timed(server.start))
            server.stop()
        print(f"server start       median {_ms(statistics.median(starts))}  ({STARTS} starts)")

        with LlamaServer(model, n_ctx=1024) as server, httpx.Client(timeout=60) as client:
            url = f"{server.openai_base_url}/chat/completions"
            body = {"model": MODEL_NAME, "messages": MESSAGES}
            latencies, streamed = [], []
            for _ in range(CALLS):
                started = time.perf_counter()
                reply = client.post(url, json=body).json()
                latencies.append(time.perf_counter() - started)
                assert reply["choices"][0]["message"]["content"] == DEMO_REPLY
            for _ in range(CALLS // 4):
                started = time.perf_counter()
                with client.stream("POST", url, json={**body, "stream": True}) as response:
                    for _line in response.iter_lines():
                        pass
                streamed.append(time.perf_counter() - started)
            stop_seconds = _timed(server.stop)
        print(f"completion p50     {_ms(statistics.median(latencies))}  ({CALLS} calls)")
        print(f"completion p90     {_ms(statistics.quantiles(latencies, n=10)[-1])}")
        print(f"streamed p50       {_ms(statistics.median(streamed))}  ({len(streamed)} calls)")
        print(f"server stop        {_ms(stop_seconds)}  (SIGTERM to exit)")


if __name__ == "__main__":
    main()
