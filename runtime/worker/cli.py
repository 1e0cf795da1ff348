"""``horde-chat worker``: probe the backend, then pop and serve until Ctrl-C."""

from __future__ import annotations

import logging
import sys
import threading
from dataclasses import dataclass
from typing import Self, TextIO

from runtime.service_process import settle
from runtime.stop_signals import stop_on_signals
from runtime.worker.backend import BackendClient
from runtime.worker.config import WorkerConfig
from runtime.worker.declaration import Probed, WorkerStartupError, probe
from runtime.worker.horde import HordeClient
from runtime.worker.job import JobRunner
from runtime.worker.loop import WorkerLoop
from runtime.worker.progress_poster import progress_for


def describe(probed: Probed) -> list[str]:
    calibration = probed.calibration
    return [
        f"worker: model {probed.model_id} on a {probed.kind.name} backend, "
        f"context {probed.context}, replies up to {probed.max_length} tokens",
        f"worker: prompt counter {probed.counter.kind} "
        f"(probe {calibration.probe_count} vs backend {calibration.probe_usage}): "
        f"{calibration.note}",
        f"worker: declares {', '.join(probed.features) or 'no features'}",
        *(f"worker: {note}" for note in probed.notes[1:]),
    ]


@dataclass
class RunningWorker:
    """A started worker: its probe result and its loop. ``stop()`` faults what it holds."""

    probed: Probed
    loop: WorkerLoop
    backend: BackendClient
    horde: HordeClient

    @classmethod
    def start(cls, config: WorkerConfig) -> Self:
        backend = BackendClient(config.backend_base, timeout=config.backend_timeout)
        try:
            probed = probe(backend, config)
        except BaseException:
            backend.close()
            raise
        horde = HordeClient(config.horde_root, config.api_key)
        runner = JobRunner(backend, horde, probed, config.backend_timeout)
        loop = WorkerLoop(config, probed, horde, runner, progress_for=progress_for(horde)).start()
        return cls(probed, loop, backend, horde)

    def describe(self) -> str:
        return "\n".join(describe(self.probed))

    def stop(self, grace: float | None = None) -> list[str]:
        faulted = self.loop.stop(grace)
        self.horde.close()
        self.backend.close()
        return faulted


def run_worker(
    config: WorkerConfig, *, out: TextIO = sys.stdout, stop_event: threading.Event | None = None
) -> int:
    """Run in the foreground until SIGINT/SIGTERM (or ``stop_event``)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # httpx logs every request at INFO: three lines a job that drown the worker's own (a
    # failed call is logged by the worker, with its job)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    with stop_on_signals(stop_event or threading.Event()) as stop:
        try:
            worker = RunningWorker.start(config)
        except WorkerStartupError as exc:
            print(f"worker: cannot start: {exc}", file=out, flush=True)
            return 2
        settle()  # what the worker built lives as long as it does (runtime.service_process)
        print(worker.describe(), file=out, flush=True)
        print("worker: serving; Ctrl-C finishes or faults the jobs it holds", file=out, flush=True)
        stop.wait()
        faulted = worker.stop()
    print(f"worker: stopped ({len(faulted)} held jobs faulted)", file=out, flush=True)
    return 0
