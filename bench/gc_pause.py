"""What a full garbage collection stalls in a service process (printed, never pass/fail).

CPython's collector walks every object it tracks in a full (generation 2) collection, and
the process stops meanwhile: in ``horde-chat up`` every service (the native API, the chat
front, the demo worker: threads of one process, one GIL), elsewhere each service's own
process. A service holds ~150,000 tracked objects once its imports and startup are done
(modules, classes, SQLAlchemy's and pydantic's tables), and a full collection runs whenever
the objects promoted since the last one pass a quarter of those, which a steady load reaches
every few thousand requests.

This bench starts what ``horde-chat up`` starts, in this process (the embedded stores, the
schema, ``runtime.launcher.SERVICE_STARTERS``: the native API, the front, the demo worker
on the tiny model), sends WARMUP completions through the front, then times a full
collection REPEATS times (the median), settles the heap as the service commands do once
started (``runtime.service_process.settle``: one collection, then ``gc.freeze``), sends WARMUP
completions more and times a full collection again. Figures: ``gc_tracked_objects``
(before settling), ``gc_full_collection_ms`` and ``gc_full_collection_settled_ms``.

The same pauses seen in the services themselves, by a ``gc.callbacks`` hook in each process
(a temporary tree, 2026-12-05, bench/e2e_overhead.py's horde leg, 3,000 requests in 99 s): a
full collection in the front (40.4 ms) and one in the worker (39.8 ms) during the steady
run, and the native API's 88 and 149 ms at its start and stop; the gen-1 collections took
0.2-2.4 ms (one 6.7 ms). Two requests in 3,000 met a 40 ms stall. The same run with the
front (``python -m runtime.front``) and the worker (``horde-chat worker``) settling their
heaps once started: no full collection in either during the 3,000 requests, and the one each
made at its stop took 0.72 ms (front) and 0.45 ms (worker), where they had taken 24.5 and
19.4 ms unsettled. The first run of this bench: 199,744 tracked objects, a full collection
160.13 ms, settled 0.64 ms.

The native API as deployed (``horde-chat native``, its own process; bench/front.py's stack,
6,000 sequential chat requests through the front, 2026-12-05 05:18-05:23), read from its
``horde_gc_pause_seconds{generation="2"}``: unsettled (a temporary tree whose ``settle``
did nothing), 7 full collections, each 50-100 ms, 531.5 ms in all, one stall every ~1,000
requests; settled, 27, of which 22 took at most 5 ms, 4 at most 10 ms and one 50-100 ms (the
settling's own collection, at its start), 180.9 ms in all. A settled heap is walked more
often, since what the collector counts as long-lived is small, and each walk is short. The
front made one full collection in either run (25-27 ms; settled: the settling's own).
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
