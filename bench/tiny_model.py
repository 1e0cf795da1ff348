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


def _figure(name: str, seconds: float) -> None:
    print(f"figure: {name} = {seconds * 1000:.1f} ms", flush=True)


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-tiny-model-") as folder:
        model = Path(folder) / "demo.gguf"
        builds = [_timed(lambda: build_tiny_model(model, rebuild=True)) for _ in range(BUILDS)]
        print(f"builds={BUILDS} starts={STARTS} calls={CALLS} (medians unless named)")
        _figure("demo_model_build_ms", statistics.median(builds))
        print(f"figure: demo_model_size_kib = {model.stat().st_size / 1024:.1f} KiB")

        starts = []
        for _ in range(STARTS):
            server = LlamaServer(model, n_ctx=1024)
            starts.append(_timed(server.start))
            server.stop()
        _figure("demo_server_start_ms", statistics.median(starts))

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
        _figure("demo_completion_p50_ms", statistics.median(latencies))
        _figure("demo_completion_p90_ms", statistics.quantiles(latencies, n=10)[-1])
        _figure("demo_streamed_p50_ms", statistics.median(streamed))
        _figure("demo_server_stop_ms", stop_seconds)  # SIGTERM to exit


if __name__ == "__main__":
    main()
