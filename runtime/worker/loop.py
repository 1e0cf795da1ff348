"""The worker's threads: pop with the declaration, serve, repeat; a clean stop.

Each of ``--threads`` threads pops one job at a time, long-polling up to ``pop_wait`` so a
new request reaches an idle worker at once; a "no job" sooner than ``poll_interval`` (an
upstream horde, or a native API stopping) is followed by a pause, as upstream's workers
poll. :meth:`WorkerLoop.stop` leaves the pool at once (a request for the model is refused,
not left waiting), lets held jobs finish for ``shutdown_grace``, then faults the rest with
worker_shutdown, so a Ctrl-C never leaves a job to its TTL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from generated.errors import WorkerShutdown
from runtime.worker.config import WorkerConfig
from runtime.worker.declaration import Probed, pop_declaration
from runtime.worker.horde import HordeClient
from runtime.worker.job import Job, JobRunner, ProgressCallback

log = logging.getLogger("horde-chat.worker")

MAX_POP_BACKOFF_SECONDS = 30.0
BRIDGE_AGENT = "horde-chat-worker:1:https://github.com/horde-chat"


def pop_body(config: WorkerConfig, probed: Probed) -> dict[str, Any]:
    """Upstream's pop fields plus the chat declaration, sent on every pop."""
    return {
        "name": config.name,
        "models": [probed.model_id],
        "bridge_agent": BRIDGE_AGENT,
        "threads": config.threads,
        "amount": 1,
        "max_length": probed.max_length,
        "max_context_length": probed.context,
        **({"wait": config.pop_wait} if config.pop_wait > 0 else {}),
        **pop_declaration(probed, config),
    }


class WorkerLoop:
    def __init__(
        self,
        config: WorkerConfig,
        probed: Probed,
        horde: HordeClient,
        runner: JobRunner,
        *,
        progress_for: Callable[[Job], ProgressCallback | None] | None = None,
    ) -> None:
        self.config, self.probed, self.horde, self.runner = config, probed, horde, runner
        self.progress_for = progress_for or (lambda job: None)
        self.body = pop_body(config, probed)
        self.stopping = threading.Event()
        self.held: dict[str, Job] = {}
        self.served = 0
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._popping: set[threading.Thread] = set()

    def start(self) -> WorkerLoop:
        for index in range(self.config.threads):
            thread = threading.Thread(target=self._serve, name=f"worker-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _serve(self) -> None:
        backoff = self.config.poll_interval
        me = threading.current_thread()
        while not self.stopping.is_set():
            asked = time.monotonic()
            with self._lock:
                self._popping.add(me)
            try:
                job = Job.from_pop(self.horde.pop(self.body))
            except Exception as exc:  # the native API is down or refused: back off, retry
                if self.stopping.is_set():
                    return  # a waiting pop cut short by the stop
                log.warning("pop failed: %s", exc)
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, MAX_POP_BACKOFF_SECONDS)
                continue
            finally:
                with self._lock:
                    self._popping.discard(me)
            backoff = self.config.poll_interval
            if job is not None and self.stopping.is_set():  # a waiting pop's job, after stop
                self.horde.fault(job.id, WorkerShutdown())
                return
            if job is None:
                answered_in = time.monotonic() - asked
                self.stopping.wait(max(0.0, self.config.poll_interval - answered_in))
                continue
            with self._lock:
                self.held[job.id] = job
            try:
                self.runner.run(job, self.progress_for(job))
            finally:
                with self._lock:
                    self.held.pop(job.id, None)
                    self.served += 1

    def stop(self, grace: float | None = None) -> list[str]:
        """Stop popping, leave the pool, wait for held jobs, fault what is left; returns the
        faulted ids. Leaving makes the worker offline at once, not 300 s after its last pop;
        a job a pop brought just before the stop is faulted at once."""
        deadline = time.monotonic() + (self.config.shutdown_grace if grace is None else grace)
        self.stopping.set()
        self.horde.leave(self.config.name)  # its waiting pops cut first
        for thread in self._threads:
            with self._lock:
                waiting_pop = thread in self._popping
            if not waiting_pop:  # a pop still waiting holds no job (and faults a late one)
                thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            left = list(self.held)
            self.held.clear()
        for job_id in left:
            self.horde.fault(job_id, WorkerShutdown())
        return left
