"""One client's slow hosts cannot delay another's: the shares of the native API's image
fetch pool and webhook sender (spec/defences.yaml, image_fetches and webhooks).

Images: three clients (each a registered key) send chat requests whose image hosts drip
their headers a byte a second, more than the pool's places between them; another client's
fast image is then taken in while every slow fetch is still held, and each slow client
past its share is refused at once with 429 TooManyImageFetches. Keyless clients have a
share per address, not one for the anonymous key (that test stays within the anonymous
key's own share per address, spec/defences.yaml anonymous). Webhooks: one user's requests
name a receiver that never answers (each delivery held for its attempts' whole deadline);
another user's webhook, to another host, arrives while the hanging ones are still tried.
"""

from __future__ import annotations

import io
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from PIL import Image

from generated.chat.names import DECL_IMAGE_TRANSPORTS, FEATURE_VISION
from generated.defences import (
    ANONYMOUS_QUEUED_PER_SOURCE,
    FETCH_QUEUE,
    FETCH_QUEUED_PER_SOURCE,
    FETCH_RUNNING_PER_SOURCE,
    FETCH_WORKERS,
)
from generated.defences import WEBHOOK_ATTEMPTS as ATTEMPTS
from generated.routes import HEADER_X_HORDE_SERVICE_PASSKEY
from generated.storage import TRANSPORT_BASE64
from generated.wire import ANONYMOUS_API_KEY, HEADER_FORWARDED_FOR
from runtime.native.objects.fetch import FETCHES
from runtime.native.queue.webhooks import SENDER
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from tests.conftest import SERVICE_PASSKEY
from tests.integration.chat_flow import BASIC, MODEL, chat_pop
from tests.integration.native_flow import pop, submit
from tests.support.native import raised_limits, running_native_with_objects
from tests.support.socket_server import SocketServer
from tests.support.vision_stack import image_part, text_part, user_turn
from tests.support.waiting import until

pytestmark = pytest.mark.integration

SLOW_CLIENTS = 3
"""The issue's probe: slow image hosts named from three sources."""
PER_SLOW_CLIENT = (FETCH_WORKERS + FETCH_QUEUE) // SLOW_CLIENTS + 1
"""Each slow client's requests: together more than the pool's places, running and waiting."""
HANGING_WEBHOOKS = 8
"""The issue's probe: eight webhooks to receivers that never answer."""


@pytest.fixture(scope="module")
def service(horde_stores: EmbeddedStores) -> Iterator[NativeService]:
    # loopback image and webhook URLs are allowed (the test-only setting): the hosts are local
    # and the front's passkey, so a test can send from several client addresses
    with running_native_with_objects(
        horde_stores,
        "horde-objects-shares-",
        image_fetch_allow_loopback=True,
        service_passkey=SERVICE_PASSKEY,
    ) as native:
        yield native


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 200, 10)).save(out, format="PNG")
    return out.getvalue()


class ImageHost(SocketServer):
    """An HTTP host on 127.0.0.1: ``/drip`` sends its status line a byte a second while the
    client listens; ``/good.png`` answers a small PNG at once. When it serves a good image it
    records in ``at_good`` how many drips were open and how many of them the horde had
    already hung up on (their peer closed: a fetch given up at its deadline)."""

    def __init__(self) -> None:
        super().__init__()
        self.at_good: list[tuple[int, int]] = []
        self._drips: set[socket.socket] = set()

    @property
    def open_drips(self) -> int:
        with self.lock:
            return len(self._drips)

    def _hung_up(self) -> tuple[int, int]:
        """Drips open, and how many of them the horde closed (EOF waiting to be read: the
        request was read whole, so anything readable is the close)."""
        with self.lock:
            drips = list(self._drips)
        closed = 0
        for conn in drips:
            try:
                readable, _, _ = select.select([conn], [], [], 0)
                closed += bool(readable) and conn.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                closed += 1
        return len(drips), closed

    def serve(self, conn: socket.socket) -> None:
        with conn:
            head = self.read_head(conn)
            if head is None:
                return
            if head.split(b" ", 2)[1] == b"/good.png":
                self.at_good.append(self._hung_up())
                body = _png()
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                return
            with self.lock:
                self._drips.add(conn)
            try:
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000:
                    if self.stopping.wait(1):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                return  # the horde hung up at its fetch deadline
            finally:
                with self.lock:
                    self._drips.discard(conn)


@pytest.fixture
def image_host() -> Iterator[ImageHost]:
    host = ImageHost()
    yield host
    host.close()


def _image_body(url: str) -> dict[str, object]:
    return {"model": MODEL, "messages": user_turn(text_part("What is it?"), image_part(url))}


def _flooded(
    service: NativeService, make_user: Any, image_host: ImageHost, clients: int, each: int
) -> tuple[httpx.Response, list[httpx.Response]]:
    """``clients`` slow clients (registered keys) send ``each`` requests of a dripping image
    at once; when every one is refused or holds its place in the pool, and the fetches
    running hang on the host, another client sends a fast image. Its answer, and theirs."""
    api = f"{service.url}/api/v2"
    slow = [make_user(f"slow{i}", kudos=10_000, concurrency=100) for i in range(clients)]
    other, owner = make_user("other", kudos=10_000), make_user("owner")
    answered: list[httpx.Response] = []

    def send(key: str, path: str) -> httpx.Response:
        with httpx.Client(base_url=api, timeout=120) as own:
            sent = own.post(
                "/generate/chat/async",
                headers={"apikey": key},
                json=_image_body(image_host.url + path),
            )
        answered.append(sent)
        return sent

    with httpx.Client(base_url=api, timeout=60) as client:
        features = [FEATURE_VISION, *BASIC]
        transports = {DECL_IMAGE_TRANSPORTS: [TRANSPORT_BASE64]}
        assert chat_pop(client, owner.api_key, features=features, **transports)["id"] is None
    # many submits at once from one address: the fetch pool is tested, not the submit rate
    with raised_limits(service, "chat_async"), ThreadPoolExecutor(32) as pool:
        futures = [pool.submit(send, user.api_key, "/drip") for _ in range(each) for user in slow]
        until(
            lambda: (
                len(answered) + FETCHES.pool.pieces() == len(futures)
                and image_host.open_drips >= min(FETCH_WORKERS, clients * FETCH_RUNNING_PER_SOURCE)
            ),
            "the slow clients' fetches running, waiting or refused",
        )
        started = time.perf_counter()
        fast = send(other.api_key, "/good.png")
        # a figure, not an assertion: how long the other client's fast image took
        print(f"figure: shares_fast_image_ms = {(time.perf_counter() - started) * 1000:.1f} ms")
        print(f"figure: shares_fast_image_status = {fast.status_code}")
        return fast, [future.result() for future in futures]


def test_one_clients_slow_image_hosts_leave_another_clients_image_its_slot(
    service, make_user, image_host
):
    fast, slow_answers = _flooded(service, make_user, image_host, SLOW_CLIENTS, PER_SLOW_CLIENT)
    assert fast.status_code == 202, fast.text
    # the fast image was fetched while every slow fetch running was still held
    ((open_drips, hung_up),) = image_host.at_good
    assert open_drips >= SLOW_CLIENTS * FETCH_RUNNING_PER_SOURCE
    assert hung_up == 0
    # each slow client held its share of the pool, and was refused past it at once
    refused = [a for a in slow_answers if a.status_code == 429]
    share = FETCH_RUNNING_PER_SOURCE + FETCH_QUEUED_PER_SOURCE
    assert len(refused) == SLOW_CLIENTS * (PER_SLOW_CLIENT - share), [
        a.status_code for a in slow_answers
    ]
    assert {a.json()["rc"] for a in refused} == {"TooManyImageFetches"}
    assert all(a.headers.get("Retry-After") for a in refused)
    assert f"({share})" in refused[0].json()["message"]
    late = [a for a in slow_answers if a.status_code == 400]
    assert len(late) == SLOW_CLIENTS * share  # each of its share fetched until its deadline
    assert all("in time" in a.json()["message"] for a in late), late[0].text


def test_keyless_clients_have_a_share_each_by_address(service, make_user, image_host):
    """The anonymous key is every keyless client's: its image fetches are shared by
    address (here two, forwarded by the front's passkey), not by the key."""
    api = f"{service.url}/api/v2"

    def from_address(address: str, path: str) -> httpx.Response:
        headers = {
            "apikey": ANONYMOUS_API_KEY,
            HEADER_X_HORDE_SERVICE_PASSKEY: SERVICE_PASSKEY,
            HEADER_FORWARDED_FOR: address,
        }
        with httpx.Client(base_url=api, timeout=120) as own:
            return own.post(
                "/generate/chat/async", headers=headers, json=_image_body(image_host.url + path)
            )

    with httpx.Client(base_url=api, timeout=60) as client:
        features = [FEATURE_VISION, *BASIC]
        transports = {DECL_IMAGE_TRANSPORTS: [TRANSPORT_BASE64]}
        owner = make_user("owner").api_key
        assert chat_pop(client, owner, features=features, **transports)["id"] is None
    share = FETCH_RUNNING_PER_SOURCE + FETCH_QUEUED_PER_SOURCE
    # within the anonymous key's share per address, past the fetch share
    slow = min(ANONYMOUS_QUEUED_PER_SOURCE, share + 1)
    with raised_limits(service, "chat_async"), ThreadPoolExecutor(slow) as pool:
        futures = [pool.submit(from_address, "203.0.113.1", "/drip") for _ in range(slow)]
        until(
            lambda: (
                image_host.open_drips == FETCH_RUNNING_PER_SOURCE
                and sum(f.done() for f in futures) + FETCHES.pool.pieces() == slow
            ),
            "one address's fetches running, waiting or refused",
        )
        other = from_address("203.0.113.2", "/good.png")
        first = [future.result() for future in futures]
    assert other.status_code == 202, other.text
    ((_, hung_up),) = image_host.at_good
    assert hung_up == 0
    assert sorted(a.status_code for a in first) == [400] * share + [429] * (slow - share)


class HangingReceiver(SocketServer):
    """A webhook receiver on ``address`` that reads each POST and never answers (the horde
    hangs up at its attempt's deadline), counting the POSTs it got."""

    def __init__(self, address: str = "127.0.0.1") -> None:
        super().__init__(address, backlog=64)
        self.posts = 0

    def serve(self, conn: socket.socket) -> None:
        with conn:
            with self.lock:
                self.posts += 1
            while not self.stopping.is_set():
                try:
                    if not conn.recv(4096):
                        return  # the horde hung up
                except OSError:
                    return


class _Answering(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.server.received.append(json.loads(self.rfile.read(length)))  # type: ignore[attr-defined]
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    # another host (127.0.0.2, loopback too) than the hanging receiver's
    server = ThreadingHTTPServer(("127.0.0.2", 0), _Answering)
    server.received = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.2:{server.server_address[1]}/hook", server.received  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def hanging() -> Iterator[HangingReceiver]:
    receiver = HangingReceiver()
    yield receiver
    receiver.close()  # its deliveries left fail at once now
    SENDER.drain()


def _landed(client: httpx.Client, requester: str, worker: str, webhook: str) -> None:
    """A text request of ``requester`` with ``webhook``, popped and answered by ``worker``."""
    body = {"prompt": "Once upon a time", "params": {"max_length": 80}, "webhook": webhook}
    accepted = client.post("/generate/text/async", headers={"apikey": requester}, json=body)
    assert accepted.status_code == 202, accepted.text
    job = pop(client, worker)
    assert job["id"], job
    assert submit(client, worker, job["id"]).status_code == 200


def test_one_users_hanging_webhook_receivers_leave_another_users_webhook_its_sender(
    service, make_user, hanging, answering
):
    url, received = answering
    slow, other = make_user("slow", kudos=10_000), make_user("other", kudos=10_000)
    owner = make_user("owner")
    # several text requests in a row from one address: the sender is tested, not the rate
    with (
        raised_limits(service, "text_async"),
        httpx.Client(base_url=f"{service.url}/api/v2", timeout=60) as client,
    ):
        for _ in range(HANGING_WEBHOOKS):
            _landed(client, slow.api_key, owner.api_key, hanging.url)
        until(lambda: hanging.posts >= 1, "a hanging delivery held by its receiver")
        started = time.perf_counter()
        _landed(client, other.api_key, owner.api_key, url)
        until(lambda: received, "the other user's webhook", seconds=ATTEMPTS * 3 * 40)
        posts_when_delivered = hanging.posts
    # a figure, not an assertion: how long the other user's webhook took to arrive
    print(f"figure: shares_other_webhook_ms = {(time.perf_counter() - started) * 1000:.1f} ms")
    assert len(received) == 1
    # delivered while the hanging ones were still being tried: each is ATTEMPTS posts
    assert posts_when_delivered < HANGING_WEBHOOKS * ATTEMPTS
