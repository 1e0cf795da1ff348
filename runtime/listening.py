"""The listening socket each HTTP service (the native API, the front) serves on.

``bind(host, port)`` binds before uvicorn starts (port 0 picks a free one), so a service
knows its URL at once, and refuses a port another process holds with ``PortInUse``, which
names the address: the commands turn it into their one-line refusal, instead of the
``OSError: [Errno 98] Address already in use`` traceback a second ``make run`` printed.
"""

from __future__ import annotations

import errno
import socket

BACKLOG = 4096
"""Connections the kernel queues before the server accepts them (uvicorn's ``backlog``): the
front's pool to the native API (100) plus every worker's and direct client's connections
must fit, and a burst of clients at the front."""


class PortInUse(Exception):
    """Another process listens on the address."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(f"{host}:{port} is already in use by another process")
        self.host = host
        self.port = port


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: a free port)."""
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted sockets only then
    # (without it, Nagle and delayed ACKs delay every response: docs/performance.md).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(host, port) from exc
        raise
    return sock
