"""One wall-clock deadline over a whole fetch, and the bounded fetch pool.

A host that drips its status line one byte at a time never trips a per-read timeout; the
fetch still ends at its deadline with the deadline's refusal. The pool refuses at once
(IntakeBusy) when every slot is taken, and frees a slot when its work ends."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from generated.errors import IntakeBusy
from runtime.native.objects.fetch import FetchPolicy, FetchPool, FetchRefused, fetch_public
from tests.support.waiting import until

DRIP_PAUSE = 0.2  # under any per-read timeout the deadline is compared with


Reply = Callable[[socket.socket, threading.Event], None]


@contextmanager
def slow_host(scheme: str, reply: Reply) -> Iterator[str]:
    """A host on 127.0.0.1 answering each connection's first read with ``reply`` (until the
    event is set, at the end); its URL root."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.recv(4096)
            with contextlib.suppress(OSError):  # the fetch hung up: what is tested
                reply(conn, stop)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"{scheme}://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    server.close()


def drip_status_line(conn: socket.socket, stop: threading.Event) -> None:
    """A status line dripped a byte per DRIP_PAUSE."""
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
        if stop.wait(DRIP_PAUSE):
            return
        conn.sendall(bytes([byte]))


def drip_tls_handshake(conn: socket.socket, stop: threading.Event) -> None:
    """A handshake record header announcing 16 KiB, then that record a byte per DRIP_PAUSE:
    the handshake's reads each return in time, so only a deadline over the whole exchange
    ends it."""
    conn.sendall(b"\x16\x03\x03\x40\x00")
    while not stop.wait(DRIP_PAUSE):
        conn.sendall(b"\x02")


@pytest.fixture
def drip() -> Iterator[str]:
    with slow_host("http", drip_status_line) as root:
        yield root


@pytest.fixture
def tls_drip() -> Iterator[str]:
    with slow_host("https", drip_tls_handshake) as root:
        yield root


def test_a_dripping_host_is_cut_off_at_the_deadline(drip: str) -> None:
    policy = FetchPolicy(timeout_seconds=1.0, allow_loopback=True)
    with pytest.raises(FetchRefused, match="in time"):
        fetch_public(f"{drip}/image.png", policy)


def test_a_host_dripping_its_tls_handshake_is_cut_off_at_the_deadline(tls_drip: str) -> None:
    # A handshake timed per read would read on for the whole 16 KiB record (an hour at this
    # pace); the stream hands the handshake what is left of the deadline, which CPython's
    # ssl applies to the handshake as a whole, so the fetch ends with the deadline's refusal.
    policy = FetchPolicy(timeout_seconds=1.0, allow_loopback=True)
    with pytest.raises(FetchRefused, match="in time"):
        fetch_public(f"{tls_drip}/image.png", policy)


def test_a_deadline_already_passed_fetches_nothing(drip: str) -> None:
    policy = FetchPolicy(timeout_seconds=5, allow_loopback=True)
    with pytest.raises(FetchRefused, match="in time"):
        fetch_public(f"{drip}/image.png", policy, deadline=0.0)


def test_the_pool_refuses_at_once_when_every_slot_is_taken() -> None:
    # two sources, each within its share: what fills up is the pool itself
    pool = FetchPool(workers=1, queued=1)
    release = threading.Event()
    started = threading.Event()

    def hold() -> str:
        started.set()
        release.wait(30)
        return "held"

    results: list[str] = []
    holders = [
        threading.Thread(target=lambda s=source: results.append(pool.run(s, hold)))
        for source in ("a", "b")
    ]
    for holder in holders:
        holder.start()
    started.wait(30)
    until(lambda: pool.pool.held("a") + pool.pool.held("b") == 2, "one running, one queued")
    with pytest.raises(IntakeBusy):
        pool.run("c", lambda: "refused")
    release.set()
    for holder in holders:
        holder.join(30)
    assert results == ["held", "held"]
    assert pool.run("c", lambda: "free again") == "free again"
