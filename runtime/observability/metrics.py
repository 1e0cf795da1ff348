"""Prometheus metrics every service exposes (``prometheus-client``).

``HttpMetrics``: request counts and durations by method, route template (``unmatched`` for
no route, so clients cannot grow the label set) and status, plus GC pauses (``GcPauses``).
``exposition`` renders a registry plus collectors built for this scrape. Processes behind one
port (``--processes N``) share values through prometheus-client's multiprocess mode
(``multiprocess_dir``, ``process_exited``), so a scrape of any process reads the whole service.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

CONTENT_TYPE = CONTENT_TYPE_LATEST
UNMATCHED = "unmatched"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
"""Seconds; the front's waits last up to minutes, so the buckets reach five."""


GC_PAUSE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
"""Seconds: a young collection takes well under a millisecond; a full one walked a whole
service, 40-150 ms, until the service commands settled their heap (runtime.service_process)."""
GC_PAUSES_KEPT = 4096
"""Pauses noted and not yet observed, at most (an idle process flushes at its next request
or scrape; past this many the oldest are dropped)."""


class GcPauses:
    """``horde_gc_pause_seconds{generation}``: how long each garbage collection stopped
    this process, noted by the process's one ``gc.callbacks`` hook from ``start()``.

    The hook times each collection once and notes it for every started ``GcPauses`` (under
    ``horde-chat up`` the front's and the native API's registries both show the process's
    pauses). It only notes; ``flush`` observes the noted ones, outside any collection. A
    collection starts on an allocation, and in multiprocess mode prometheus-client creates
    a value under one non-reentrant lock, allocating meanwhile: a hook that observed would
    then wait for a lock its own thread holds. ``HttpMetrics`` flushes after each request,
    the services' /metrics before each scrape."""

    _started: ClassVar[list[GcPauses]] = []
    """Every started instance, which the hook notes each pause for."""
    _began = 0.0

    def __init__(self, registry: CollectorRegistry) -> None:
        histogram = Histogram(
            "horde_gc_pause_seconds",
            "Seconds each garbage collection stopped this process, by generation (2: full).",
            ["generation"],
            buckets=GC_PAUSE_BUCKETS,
            registry=registry,
        )
        # every child made now: none is created under a collection's flush
        self.generations = [histogram.labels(str(g)) for g in range(3)]
        self.noted: deque[tuple[int, float]] = deque(maxlen=GC_PAUSES_KEPT)

    def start(self) -> GcPauses:
        if not GcPauses._started:
            gc.callbacks.append(GcPauses._hook)
        GcPauses._started.append(self)
        return self

    def stop(self) -> None:
        GcPauses._started.remove(self)
        if not GcPauses._started:
            gc.callbacks.remove(GcPauses._hook)

    @staticmethod
    def _hook(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            GcPauses._began = time.perf_counter()
            return
        pause = (info["generation"], time.perf_counter() - GcPauses._began)
        for pauses in GcPauses._started:
            pauses.noted.append(pause)

    def flush(self) -> None:
        """Observe every pause noted since the last flush."""
        while True:
            try:  # another thread may flush meanwhile: each pause is taken once
                generation, seconds = self.noted.popleft()
            except IndexError:
                return
            self.generations[generation].observe(seconds)


class HttpMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.gc = GcPauses(registry).start()
        self.requests = Counter(
            "horde_http_requests",
            "HTTP requests answered, by route and status.",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "horde_http_request_duration_seconds",
            "Seconds from a request's arrival to its response (a stream: to its end).",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)
        if self.gc.noted:
            self.gc.flush()


MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus-client's variable: where each process of a multi-process service writes."""


def multiprocess() -> bool:
    """Whether this process is one of several sharing their metrics through files."""
    return bool(os.environ.get(MULTIPROC_ENV))


@contextlib.contextmanager
def multiprocess_dir() -> Iterator[Path]:
    """For a parent about to start several server processes: a new empty directory in
    ``PROMETHEUS_MULTIPROC_DIR`` (the children inherit it), removed, and the variable
    restored, at exit. Fresh each run, so no file of an earlier run is summed."""
    previous = os.environ.get(MULTIPROC_ENV)
    path = Path(tempfile.mkdtemp(prefix="horde-metrics-"))
    os.environ[MULTIPROC_ENV] = str(path)
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = previous
        shutil.rmtree(path, ignore_errors=True)


def process_exited() -> None:
    """A server process stops: its live gauges (open waits, streams) leave the sum."""
    if multiprocess():
        mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


def exposition(registry: CollectorRegistry, collectors: Iterable[Collector] = ()) -> bytes:
    """The text exposition of ``registry`` (in multiprocess mode: of every process's files)
    and of ``collectors`` (computed now)."""
    if multiprocess():
        merged = CollectorRegistry(auto_describe=False)
        MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
        out = generate_latest(merged)
    else:
        out = generate_latest(registry)
    extra = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        extra.register(collector)
    return out + generate_latest(extra)
