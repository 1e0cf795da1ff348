"""What a full garbage collection stalls in a service process (printed, never pass/fail).

A full (generation 2) collection walks every object CPython tracks while the process stops:
in ``horde-chat up`` every service (threads of one process, one GIL), elsewhere each
service's own process. A started service tracks ~150,000 objects, and a full collection runs
whenever the objects promoted since the last one pass a quarter of those, every few thousand
requests under a steady load.

This bench starts what ``horde-chat up`` starts, in this process (the embedded stores,
``runtime.launcher.SERVICE_STARTERS`` with the demo worker on the tiny model), sends WARMUP
completions through the front and times a full collection (the median of REPEATS); then
settles the heap as the services do (``runtime.service_process.settle``: one collection,
then ``gc.freeze``), sends WARMUP more and times one again. Figures: ``gc_tracked_objects``,
``gc_full_collection_ms``, ``gc_full_collection_settled_ms``. Run:
``.venv/bin/python bench/gc_pause.py``; docs/performance.md has the pauses measured.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.tiny_model import MESSAGES
from runtime.config import Settings
from runtime.launcher import SERVICE_STARTERS
from runtime.native.db.migrate import upgrade
from runtime.service_process import Service, settle
from runtime.stores.embedded import EmbeddedStores
from runtime.worker.llama_server import free_port
from runtime.worker.tiny_model import DEMO_REPLY, MODEL_NAME

WARMUP = int(os.environ.get("BENCH_GC_REQUESTS", "100"))
REPEATS = 5
READY_TIMEOUT = 120.0


def completions(front_url: str, count: int) -> None:
    """``count`` plain completions through the front (the anonymous key), each checked."""
    body = {"model": MODEL_NAME, "messages": MESSAGES}
    deadline = time.monotonic() + READY_TIMEOUT
    with httpx.Client(base_url=front_url, timeout=60) as client:
        done = 0
        while done < count:
            response = client.post("/v1/chat/completions", json=body)
            if response.status_code in (404, 503) and time.monotonic() < deadline:
                time.sleep(0.5)  # the demo worker not online yet: its model unknown, unserved
                continue
            response.raise_for_status()
            if response.json()["choices"][0]["message"]["content"] != DEMO_REPLY:
                raise RuntimeError(f"unexpected reply: {response.text[:200]}")
            done += 1


def full_collection_ms() -> float:
    """The median time of REPEATS full collections, in milliseconds."""
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-gc-") as folder:
        settings = Settings(
            data_dir=Path(folder),
            native_port=free_port(),
            front_port=free_port(),
            rate_limits_enabled=False,  # WARMUP requests back to back, not the limits' pace
        )
        services: list[Service] = []
        with EmbeddedStores.start(settings) as stores:
            upgrade(stores.database_url)
            try:
                for starter in SERVICE_STARTERS:
                    services.append(starter(settings, stores))
                front_url = f"http://{settings.front_host}:{settings.front_port}"
                completions(front_url, WARMUP)
                tracked = len(gc.get_objects())
                before = full_collection_ms()
                settle()
                completions(front_url, WARMUP)
                after = full_collection_ms()
            finally:
                for service in reversed(services):
                    service.stop()
    print("a full collection in a process running what `horde-chat up` runs")
    print(f"figure: gc_tracked_objects = {tracked} objects")
    print(f"figure: gc_full_collection_ms = {before:.2f} ms")
    print(f"figure: gc_full_collection_settled_ms = {after:.2f} ms")


if __name__ == "__main__":
    main()
