"""What one client's connections may cost the services (spec/defences.yaml), on the live
native API and a live front at the shipped settings: a body sent slowly holds no request
thread and is cut at the body deadline; one address has a bounded number of requests
arriving at once at the native API (and a thousand whole ones waiting cost it nothing:
tests/integration/test_native_long_poll.py); a request's head is capped in size, lines and
time on both services. Each refusal comes in the surface's envelope, and the connection is
closed after it. The front's parser turns are shared fairly between addresses."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from generated.defences import (
    ARRIVING_PER_SOURCE,
    BODY_DEADLINE_SECONDS,
    MAX_HEADER_BYTES,
    MAX_HEADER_COUNT,
)
from runtime.front.admission import PARSER, PARSER_PROCESSES, PARSER_SLOTS
from runtime.front.server import FrontHttp, FrontService
from runtime.native.asgi import THREADS
from runtime.native.server import NativeHttp, NativeService
from runtime.stores.embedded import EmbeddedStores
from tests.support.front import running_front

pytestmark = pytest.mark.integration

CHAT_HEAD = (
    b"POST /api/v2/generate/chat/async HTTP/1.1\r\nhost: horde\r\napikey: 0000000000\r\n"
    b"content-type: application/json\r\ncontent-length: 400\r\n\r\n"
)
"""A chat submit's head whose 400-byte body is still to come."""
FLOOD_BYTES = 64 * 1024 * 1024
"""Header bytes a flood sends at most, unless the service answers and closes first."""
ANSWER_SECONDS = 30.0


@pytest.fixture(scope="module")
def front(horde_stores: EmbeddedStores, native_service: NativeService) -> Iterator[FrontService]:
    with running_front(horde_stores.redis_url, [native_service.url]) as service:
        yield service


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


def connect(url: str, source: str) -> socket.socket:
    sock = socket.create_connection(
        address(url), timeout=ANSWER_SECONDS, source_address=(source, 0)
    )
    return sock


def answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body of the answer on ``sock``, read until it is whole."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed without an answer: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    while len(body) < int(headers.get("content-length", 0)):
        body += sock.recv(65536)
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def closed(sock: socket.socket) -> bool:
    """Whether the service closed ``sock`` (what it still sends is read and dropped)."""
    try:
        while chunk := sock.recv(65536):
            del chunk
    except ConnectionResetError:
        pass
    return True


# ---------------------------------------------------------------- bodies


def test_bodies_sent_slowly_hold_no_request_thread(native_service: NativeService) -> None:
    # More clients than the API has client threads each send a chat submit's head and then
    # its body a byte at a time (each from an address of its own, so no rate limit stops
    # them first). A body read on a request thread held each thread until its body came.
    slow = [connect(native_service.url, f"127.0.1.{n + 1}") for n in range(THREADS + 4)]
    try:
        for sock in slow:
            sock.sendall(CHAT_HEAD + b" ")
        users = httpx.get(f"{native_service.url}/api/v2/users", timeout=BODY_DEADLINE_SECONDS / 2)
        assert users.status_code == 200
        heartbeat = httpx.get(f"{native_service.url}/api/v2/status/heartbeat", timeout=10)
        assert heartbeat.status_code == 200
    finally:
        for sock in slow:
            sock.close()


def test_a_body_not_whole_by_the_deadline_is_408_and_closed(
    native_service: NativeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The shipped deadline is BODY_DEADLINE_SECONDS; a short one shows its refusal without
    # the test waiting that long.
    monkeypatch.setattr(native_service.app, "body_deadline", 0.5)
    with connect(native_service.url, "127.0.2.1") as sock:
        sock.sendall(CHAT_HEAD + b'{"model":')
        status, headers, body = answer(sock)
        assert status == 408
        assert json.loads(body)["rc"] == "RequestTimeout"
        assert headers["connection"] == "close"
        assert closed(sock)


# ---------------------------------------------------------------- connections


def served_from(url: str, source: str) -> bool:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=ANSWER_SECONDS) as client:
        try:
            return client.get(f"{url}/api/v2/status/heartbeat").status_code == 200
        except httpx.TransportError:
            return False


PARTIAL_HEAD = b"GET /api/v2/status/heartbeat HTTP/1.1\r\nhost: horde\r\n"
"""A request's head still arriving (its end not sent)."""


def test_one_address_has_a_bounded_number_of_requests_arriving(
    native_service: NativeService,
) -> None:
    url = native_service.url
    held = [connect(url, "127.0.3.1") for _ in range(ARRIVING_PER_SOURCE)]
    try:
        for sock in held:
            sock.sendall(PARTIAL_HEAD)
        with connect(url, "127.0.3.1") as over:
            over.sendall(PARTIAL_HEAD)
            status, headers, body = answer(over)
            assert status == 429
            assert json.loads(body)["rc"] == "TooManyConnections"
            assert "retry-after" in headers
            assert closed(over)
        assert served_from(url, "127.0.3.2")  # another address is not held up
        finishing = held.pop()
        finishing.sendall(b"\r\n")  # a request arrived whole no longer counts
        assert answer(finishing)[0] == 200
        finishing.close()
        assert served_from(url, "127.0.3.1")
    finally:
        for sock in held:
            sock.close()


def test_a_head_not_whole_by_its_deadline_is_408_and_closed(
    surface: tuple[str, str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The shipped deadline is HEAD_DEADLINE_SECONDS; a short one shows its refusal without
    # the test waiting that long.
    name, url, path = surface
    monkeypatch.setattr(NativeHttp if name == "native" else FrontHttp, "head_deadline", 0.5)
    with connect(url, "127.0.2.2") as silent, connect(url, "127.0.2.3") as slow:
        slow.sendall(b"GET " + path + b" HTTP/1.1\r\nhost: horde\r\n")
        for sock in (silent, slow):
            status, _headers, body = answer(sock)
            assert status == 408
            assert envelope_code(name, body) == "RequestTimeout"
            assert closed(sock)


# ---------------------------------------------------------------- headers


def head_with(lines: list[bytes], path: bytes) -> bytes:
    return b"GET " + path + b" HTTP/1.1\r\nhost: horde\r\n" + b"".join(lines) + b"\r\n"


def envelope_code(surface: str, body: bytes) -> str:
    payload = json.loads(body)
    return str(payload["rc"] if surface == "native" else payload["error"]["code"])


SURFACES = {"native": b"/api/v2/status/heartbeat", "front": b"/healthz"}


@pytest.fixture(params=sorted(SURFACES))
def surface(
    request: pytest.FixtureRequest, native_service: NativeService, front: FrontService
) -> tuple[str, str, bytes]:
    name = str(request.param)
    return name, native_service.url if name == "native" else front.url, SURFACES[name]


def test_headers_within_the_caps_are_served(surface: tuple[str, str, bytes]) -> None:
    _name, url, path = surface
    lines = [b"x-pad-%d: %s\r\n" % (n, b"a" * 100) for n in range(MAX_HEADER_COUNT - 2)]
    with connect(url, "127.0.4.1") as sock:
        sock.sendall(head_with(lines, path))
        assert answer(sock)[0] == 200


@pytest.mark.parametrize("over", ["bytes", "count"])
def test_headers_over_a_cap_are_431_and_closed(surface: tuple[str, str, bytes], over: str) -> None:
    name, url, path = surface
    if over == "bytes":
        lines = [b"x-pad: " + b"a" * MAX_HEADER_BYTES + b"\r\n"]
    else:
        lines = [b"x-pad-%d: a\r\n" % n for n in range(MAX_HEADER_COUNT + 1)]
    with connect(url, "127.0.4.2") as sock:
        sock.sendall(head_with(lines, path))
        status, headers, body = answer(sock)
        assert status == 431
        assert envelope_code(name, body) == "HeadersTooLarge"
        assert headers["connection"] == "close"
        assert closed(sock)


def test_a_flood_of_headers_is_cut_off_at_the_cap(surface: tuple[str, str, bytes]) -> None:
    # Headers that never end: the service answers once they pass the cap and closes the
    # connection, long before the flood's end (without a cap it kept every byte of them).
    name, url, path = surface
    line = b"x-pad: " + b"a" * 8000 + b"\r\n"
    with connect(url, "127.0.4.3") as sock:
        sock.sendall(b"GET " + path + b" HTTP/1.1\r\nhost: horde\r\n")
        sent = 0
        try:
            while sent < FLOOD_BYTES and not select.select([sock], [], [], 0)[0]:
                sock.sendall(line)
                sent += len(line)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert sent < FLOOD_BYTES, "the flood was taken whole"
        status, _headers, body = answer(sock)
        assert status == 431
        assert envelope_code(name, body) == "HeadersTooLarge"


# ---------------------------------------------------------------- parse turns


def dry_run_body(size: int) -> bytes:
    """A chat body of about ``size`` bytes the front parses, validates and refuses (400: a
    dry run is the native route's), never submitting it."""
    part = b'{"type":"text","text":"xxxxxxxx"},'
    head = b'{"model":"m","horde":{"dry_run":true},"messages":[{"role":"user","content":['
    return head + part * (size // len(part)) + b'{"type":"text","text":"x"}]}]}'


async def _post_from(url: str, source: str, body: bytes) -> None:
    host, port = address(url)
    reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: horde\r\ncontent-type: application/json\r\n"
        + b"content-length: %d\r\n\r\n" % len(body)
        + body
    )
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"400", head
    writer.close()


def test_a_flood_of_large_bodies_from_one_address_does_not_queue_anothers(
    front: FrontService,
) -> None:
    # The parser processes are stopped while one address's bodies and then another's
    # arrive, so all of them wait for a turn; once they run again, the other address's body
    # is given a turn after about one of the flood's, not after all of them. The order is
    # the order turns are given, recorded as each begins: the order answers reach the
    # client also depends on how the machine schedules the work after the parse.
    share = front.server.config.app.state.front.parse_share
    flood, body = 40, dry_run_body(40 * 1024)
    deadline = time.monotonic() + ANSWER_SECONDS
    while len(PARSER.pids()) < PARSER_PROCESSES:
        assert time.monotonic() < deadline, "the front's parser processes did not start"
        time.sleep(0.05)
    pids = PARSER.pids()
    given: list[str] = []
    take_turn = share.turn

    @contextlib.asynccontextmanager
    async def recorded_turn(source: str, size: int) -> AsyncIterator[None]:
        async with take_turn(source, size):
            given.append(source)
            yield

    async def run() -> None:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            sends = [
                asyncio.create_task(_post_from(front.url, "127.0.5.1", body)) for _ in range(flood)
            ]
            await _until(lambda: len(share.waiting) == flood - PARSER_SLOTS)
            sends.append(asyncio.create_task(_post_from(front.url, "127.0.5.2", body)))
            await _until(lambda: len(share.waiting) == flood - PARSER_SLOTS + 1)
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        await asyncio.wait_for(asyncio.gather(*sends), ANSWER_SECONDS)

    share.turn = recorded_turn  # records the turns the share gives
    try:
        asyncio.run(run())
    finally:
        del share.turn
    assert given.count("127.0.5.1") == flood, given
    assert given.index("127.0.5.2") <= PARSER_SLOTS + 1, given


async def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + ANSWER_SECONDS
    while not condition():
        assert time.monotonic() < deadline, "the front did not take the requests in"
        await asyncio.sleep(0.01)
