"""Run llama-cpp-python's OpenAI-compatible server as a child process.

    with LlamaServer(build_tiny_model()) as server:
        httpx.get(f"{server.base_url}/v1/models")

The server applies the GGUF's own chat template and serves ``/v1/models``, the chat and text
completions and ``/extras/tokenize[/count]``. Its output goes to a log file whose tail is
quoted when it fails to start.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import httpx

from runtime.worker.tiny_model import MODEL_NAME

# llama.cpp rounds the context up to a multiple of 256 while llama-cpp-python sizes its token
# buffer by the requested n_ctx: a prompt between the two crashes the request with a 500
# instead of the context_length_exceeded error. So only multiples are accepted.
CONTEXT_MULTIPLE = 256
READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 10.0
_POLL_INTERVAL_SECONDS = 0.05
_LOG_TAIL_CHARS = 2000


class LlamaServerError(RuntimeError):
    """The server did not start, or exited while we waited for it."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS says is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """One ``python -m llama_cpp.server`` process serving one model under one alias.

    ``port=None`` picks a free port; ``n_ctx`` is the context the backend really has (the
    server exposes it on no route, so a worker has to be told it). ``extra_args`` are passed
    through to the server (for example ``["--n_threads", "2"]``).
    """

    def __init__(
        self,
        model: Path | str,
        *,
        alias: str = MODEL_NAME,
        host: str = "127.0.0.1",
        port: int | None = None,
        n_ctx: int = 2048,
        log_path: Path | str | None = None,
        extra_args: list[str] | None = None,
        ready_timeout: float = READY_TIMEOUT_SECONDS,
    ) -> None:
        if n_ctx <= 0 or n_ctx % CONTEXT_MULTIPLE:
            raise ValueError(
                f"n_ctx must be a positive multiple of {CONTEXT_MULTIPLE}, got {n_ctx}"
            )
        self.model = Path(model)
        self.alias = alias
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.n_ctx = n_ctx
        self.log_path = Path(log_path) if log_path is not None else None
        self.extra_args = list(extra_args or [])
        self.ready_timeout = ready_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        """``http://host:port``; the OpenAI routes are under ``/v1``."""
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """What an OpenAI client takes as ``base_url``."""
        return f"{self.base_url}/v1"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model),
            "--model_alias",
            self.alias,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.n_ctx),
            *self.extra_args,
        ]

    def start(self) -> Self:
        """Start the process and return once ``/v1/models`` answers 200."""
        if self._process is not None:
            raise LlamaServerError("this server was already started")
        if not self.model.is_file():
            raise LlamaServerError(f"model file not found: {self.model}")
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("ab")
        else:
            # Lives as long as the server; closed in stop().
            self._log = tempfile.TemporaryFile(prefix="llama-server-", suffix=".log")  # noqa: SIM115
        self._process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches only us; we stop the child ourselves
        )
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        url = f"{self.openai_base_url}/models"
        with httpx.Client(timeout=2.0) as client:
            while True:
                assert self._process is not None
                code = self._process.poll()
                if code is not None:
                    raise LlamaServerError(
                        f"llama.cpp server exited with code {code} before it was ready:\n"
                        f"{self.log_tail()}"
                    )
                try:
                    if client.get(url).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise LlamaServerError(
                        f"llama.cpp server not ready on {url} after {self.ready_timeout:.0f} s:\n"
                        f"{self.log_tail()}"
                    )
                time.sleep(_POLL_INTERVAL_SECONDS)

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; returns the exit code."""
        process, self._process = self._process, None
        code = None
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            code = process.returncode
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def log_tail(self, chars: int = _LOG_TAIL_CHARS) -> str:
        """The end of the server's output so far."""
        if self._log is None:
            return ""
        self._log.flush()
        size = os.fstat(self._log.fileno()).st_size
        start = max(0, size - chars)
        return os.pread(self._log.fileno(), size - start, start).decode("utf-8", "replace")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
