"""The native API keeps accepting while many idle connections are open (the front pools 100)."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import httpx
import pytest

pytestmark = pytest.mark.integration

IDLE_CONNECTIONS = 150  # above waitress's default connection_limit of 100


def test_a_request_is_served_while_more_than_a_hundred_connections_sit_idle(
    native_url: str,
) -> None:
    parts = urlsplit(native_url)
    idle = []
    try:
        for _ in range(IDLE_CONNECTIONS):
            idle.append(socket.create_connection((parts.hostname, parts.port), timeout=5))
        # With the default limit waitress stops accepting, and this request is never read.
        response = httpx.get(f"{native_url}/status/heartbeat", timeout=10)
    finally:
        for sock in idle:
            sock.close()
    assert response.status_code == 200
    assert response.json()["message"] == "OK"
