"""A raw TCP server for tests that need a peer HTTP libraries will not be: one that drips,
hangs or never answers. Each connection is handed to ``serve`` on a thread of its own."""

from __future__ import annotations

import socket
import threading


class SocketServer:
    """Listens on ``address`` (a free port); ``url`` is ``http://address:port``. A subclass
    writes ``serve(conn)``; ``stopping`` is set by ``close`` for the serving threads."""

    def __init__(self, address: str = "127.0.0.1", backlog: int = 128) -> None:
        self.sock = socket.create_server((address, 0))
        self.sock.listen(backlog)
        self.url = f"http://{address}:{self.sock.getsockname()[1]}"
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    @staticmethod
    def read_head(conn: socket.socket) -> bytes | None:
        """The request's head (through its blank line); None when the client closed first."""
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                return None
            head += chunk
        return head

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def close(self) -> None:
        self.stopping.set()
        self.sock.close()
