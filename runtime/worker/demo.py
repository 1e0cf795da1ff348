"""The demo worker of ``horde-chat up``: the demo model on llama.cpp, served by a real worker.

On start it builds the demo model (first run only; cached under the data folder), starts
llama-cpp-python's server on it and runs a chat worker against the native API with the API
key it is given, so an OpenAI SDK call to the front is answered by the demo model. The
launcher (``runtime.launcher.demo_worker_key``) creates or reuses the worker's user: like
every worker, this one reaches the horde only through the native API.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Self, TextIO

from runtime.config import Settings
from runtime.worker.cli import RunningWorker
from runtime.worker.config import WorkerConfig
from runtime.worker.job import log as job_log
from runtime.worker.llama_server import LlamaServer
from runtime.worker.tiny_model import build_tiny_model, default_model_path

DEMO_CONTEXT = 2048
DEMO_MAX_LENGTH = 512
DEMO_WORKER_NAME = "demo-worker"
LINE_PREFIX = "worker "
"""The demo worker's lines on ``horde-chat up``'s console, beside the services' access lines
(``native ...``, ``front ...``)."""


def show_job_lines(stream: TextIO | None = None) -> None:
    """The worker's INFO lines (a job taken and how it ended, with the request id it traces
    back to) on ``stream`` (stderr), unless its logger already has a handler: ``horde-chat
    worker`` configures logging itself, ``horde-chat up`` does not."""
    logger = logging.getLogger(job_log.name)
    if logger.handlers:
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter(LINE_PREFIX + "%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


@dataclass
class DemoWorkerService:
    server: LlamaServer
    worker: RunningWorker

    @classmethod
    def start(cls, settings: Settings, api_key: str) -> Self:
        model = build_tiny_model(default_model_path(settings.data_dir))
        log_path = settings.data_dir / "logs" / "llama-server.log"
        server = LlamaServer(model, n_ctx=DEMO_CONTEXT, log_path=log_path).start()
        try:
            config = WorkerConfig(
                horde_url=f"http://{settings.native_host}:{settings.native_port}",
                api_key=api_key,
                backend_url=server.openai_base_url,
                name=DEMO_WORKER_NAME,
                context=DEMO_CONTEXT,
                max_length=DEMO_MAX_LENGTH,
                gguf=model,
                shutdown_grace=5.0,
            )
            show_job_lines()
            worker = RunningWorker.start(config)
        except BaseException:
            server.stop()
            raise
        return cls(server, worker)

    def describe(self) -> str:
        return (
            f"demo model: {self.server.model} on llama.cpp at {self.server.openai_base_url}\n"
            f"{self.worker.describe()}"
        )

    def stop(self) -> None:
        try:
            self.worker.stop()
        finally:
            self.server.stop()
