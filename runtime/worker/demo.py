"""The demo worker of ``horde-chat up``: the demo model on llama.cpp, served by a real worker.

On start it builds the demo model (first run only; cached under the data folder), starts
llama-cpp-python's server on it, creates the demo worker's user (or reuses it: its key is
kept in ``<data dir>/demo-worker.key``) and runs a chat worker against the native API, so
an OpenAI SDK call to the front is answered by the demo model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from generated.errors import InvalidAPIKey
from runtime.config import Settings
from runtime.native.accounts.keys import create_user, user_for_key
from runtime.stores.database import make_engine, make_sessionmaker, transaction
from runtime.stores.embedded import EmbeddedStores
from runtime.worker.cli import RunningWorker
from runtime.worker.config import WorkerConfig
from runtime.worker.llama_server import LlamaServer
from runtime.worker.tiny_model import build_tiny_model, default_model_path

DEMO_CONTEXT = 2048
DEMO_MAX_LENGTH = 512
DEMO_USER = "demo-worker"
KEY_FILE = "demo-worker.key"


def demo_worker_key(database_url: str, key_file: Path) -> str:
    """The demo worker user's API key: the kept one while it still names a user, else new."""
    engine = make_engine(database_url, pool_size=1, max_overflow=0)
    try:
        sessions = make_sessionmaker(engine)
        if key_file.exists():
            kept = key_file.read_text().strip()
            try:
                with transaction(sessions) as session:
                    user_for_key(session, kept)
                return kept
            except InvalidAPIKey:
                pass  # the database was reset: make a new user
        with transaction(sessions) as session:
            _, api_key = create_user(session, DEMO_USER)
    finally:
        engine.dispose()
    key_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(api_key + "\n")
    return api_key


@dataclass
class DemoWorkerService:
    server: LlamaServer
    worker: RunningWorker

    @classmethod
    def start(cls, settings: Settings, stores: EmbeddedStores) -> Self:
        model = build_tiny_model(default_model_path(settings.data_dir))
        log_path = settings.data_dir / "logs" / "llama-server.log"
        server = LlamaServer(model, n_ctx=DEMO_CONTEXT, log_path=log_path).start()
        try:
            api_key = demo_worker_key(stores.database_url, settings.data_dir / KEY_FILE)
            config = WorkerConfig(
                horde_url=f"http://{settings.native_host}:{settings.native_port}",
                api_key=api_key,
                backend_url=server.openai_base_url,
                name="demo-worker",
                context=DEMO_CONTEXT,
                max_length=DEMO_MAX_LENGTH,
                gguf=model,
                shutdown_grace=5.0,
            )
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
