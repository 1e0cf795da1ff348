"""runtime.listening: the services' listening socket, and a port another process holds
refused by its address."""

from __future__ import annotations

import socket

import pytest

from runtime.listening import PortInUse, bind


def test_a_free_port_listens_with_nodelay_able_sockets() -> None:
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.getsockname()[1] > 0
        assert sock.proto == socket.IPPROTO_TCP  # asyncio sets TCP_NODELAY on accepted ones
    finally:
        sock.close()


def test_a_taken_port_is_refused_by_its_address() -> None:
    taken = bind("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        with pytest.raises(PortInUse, match=rf"^127\.0\.0\.1:{port} is already in use") as refused:
            bind("127.0.0.1", port)
        assert (refused.value.host, refused.value.port) == ("127.0.0.1", port)
    finally:
        taken.close()
