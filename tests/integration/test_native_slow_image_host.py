"""A slow image host cannot hold the native API.

The image host drips its response headers one byte a second. 100 chat requests naming its
images are sent at once: while they are in flight, /status/heartbeat and a pop answer
(their slowest times are printed as figures: ``slow_host_heartbeat_max_ms``,
``slow_host_pop_max_ms``); each image request ends with the fetch deadline's refusal (400
ImageValidationFailed, "in time") or, past the requester's share of the bounded fetch pool
(tests/integration/test_shared_pool_shares.py has several clients), with
TooManyImageFetches at once (429); afterwards the pool is free again and a good image is
taken in. A request refused
for a reason that needs no image (an unknown model, a kudos cap) never reaches the image
host.
"""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from PIL import Image

from generated.chat.names import DECL_IMAGE_TRANSPORTS, FEATURE_VISION
from generated.defences import FETCH_QUEUED_PER_SOURCE, FETCH_RUNNING_PER_SOURCE
from generated.storage import TRANSPORT_BASE64
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from tests.integration.chat_flow import BASIC, MODEL, chat_pop
from tests.support.native import raised_limits, running_native_with_objects
from tests.support.socket_server import SocketServer
from tests.support.vision_stack import image_part, text_part, user_turn

pytestmark = pytest.mark.integration

IN_FLIGHT = 100
"""Image requests at once (the issue's figure): far more than the fetch pool's slots,
running and queued."""
SHARE = FETCH_RUNNING_PER_SOURCE + FETCH_QUEUED_PER_SOURCE
"""The fetches one requester may hold, running and waiting."""
PROBES = 10
"""Heartbeats and pops timed while the slow fetches are in flight."""


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(out, format="PNG")
    return out.getvalue()


class DripHost(SocketServer):
    """An HTTP host on 127.0.0.1: ``/drip`` sends its status line one byte a second for as
    long as the client listens; ``/good.png`` answers a small PNG at once. It counts the
    requests it got and the drips still open."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[str] = []
        self.open_drips = 0

    def serve(self, conn: socket.socket) -> None:
        with conn:
            head = self.read_head(conn)
            if head is None:
                return
            path = head.split(b" ", 2)[1].decode()
            with self.lock:
                self.requests.append(path)
            if path == "/good.png":
                body = _png()
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                return
            with self.lock:
                self.open_drips += 1
            try:
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000:
                    if self.stopping.wait(1):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                return  # the horde hung up: what this test waits for
            finally:
                with self.lock:
                    self.open_drips -= 1


@pytest.fixture(scope="module")
def service(horde_stores: EmbeddedStores) -> Iterator[NativeService]:
    # loopback image URLs are allowed (the test-only setting): the image host is local
    with running_native_with_objects(
        horde_stores, "horde-objects-drip-", image_fetch_allow_loopback=True
    ) as native:
        yield native


@pytest.fixture
def host() -> Iterator[DripHost]:
    drip = DripHost()
    yield drip
    drip.close()


def _body(url: str, **fields: object) -> dict[str, object]:
    messages = user_turn(text_part("What is it?"), image_part(url))
    return {"model": MODEL, "messages": messages, **fields}


def _vision_pop(client: httpx.Client, key: str) -> dict:
    features = [FEATURE_VISION, *BASIC]
    return chat_pop(client, key, features=features, **{DECL_IMAGE_TRANSPORTS: [TRANSPORT_BASE64]})


def test_a_dripping_image_host_holds_nothing_but_the_fetch_pool(
    service, native_db, make_user, host
):
    api = f"{service.url}/api/v2"
    requester, owner = make_user("requester", kudos=10_000, concurrency=100), make_user("owner")
    heartbeat_ms: list[float] = []
    pop_ms: list[float] = []
    with httpx.Client(base_url=api, timeout=60) as client:
        assert _vision_pop(client, owner.api_key)["id"] is None  # a vision worker is online

        def send(_: int) -> httpx.Response:
            with httpx.Client(base_url=api, timeout=120) as own:
                body = _body(f"{host.url}/drip")
                return own.post(
                    "/generate/chat/async", headers={"apikey": requester.api_key}, json=body
                )

        # IN_FLIGHT requests from one address and key at once: what is tested is the fetch
        # pool, not the submit rate (2 a second), so chat_async is raised while they run
        with raised_limits(service, "chat_async"), ThreadPoolExecutor(IN_FLIGHT) as pool:
            futures = [pool.submit(send, i) for i in range(IN_FLIGHT)]
            while host.open_drips < FETCH_RUNNING_PER_SOURCE:  # its share hangs on the host
                assert not any(f.done() and f.result().status_code != 429 for f in futures)
                time.sleep(0.05)
            heartbeats, pops = [], []
            for _ in range(PROBES):
                started = time.perf_counter()
                heartbeats.append(client.get("/status/heartbeat"))
                timed = time.perf_counter()
                pops.append(
                    client.post(
                        "/generate/text/pop",
                        headers={"apikey": owner.api_key},
                        json={"name": "text-worker", "models": ["m"], "max_length": 80},
                    )
                )
                heartbeat_ms.append((timed - started) * 1000)
                pop_ms.append((time.perf_counter() - timed) * 1000)
            still_dripping = host.open_drips
            answers = [f.result() for f in futures]
    assert {h.status_code for h in heartbeats} == {200}
    assert {p.status_code for p in pops} == {200}, pops[0].text
    assert still_dripping >= 1  # all answered while the slow fetches were in flight
    # figures, not assertions: how long a heartbeat and a pop took meanwhile
    print(f"figure: slow_host_heartbeat_max_ms = {max(heartbeat_ms):.1f} ms")
    print(f"figure: slow_host_pop_max_ms = {max(pop_ms):.1f} ms")
    codes = sorted(a.status_code for a in answers)
    late = [a for a in answers if a.status_code == 400]
    busy = [a for a in answers if a.status_code == 429]
    assert len(late) + len(busy) == IN_FLIGHT, codes
    assert len(busy) >= IN_FLIGHT - SHARE, codes
    assert {a.json()["rc"] for a in late} == {"ImageValidationFailed"}
    assert all("in time" in a.json()["message"] for a in late), late[0].text
    assert {a.json()["rc"] for a in busy} == {"TooManyImageFetches"}
    assert all(a.headers.get("Retry-After") for a in busy)
    assert len(host.requests) <= SHARE  # the refused ones fetched nothing
    # the horde hung up on every drip, and the pool takes a good image again
    deadline = time.monotonic() + 30
    while host.open_drips and time.monotonic() < deadline:
        time.sleep(0.1)
    assert host.open_drips == 0
    with httpx.Client(base_url=api, timeout=60) as client:
        good = client.post(
            "/generate/chat/async",
            headers={"apikey": requester.api_key},
            json=_body(f"{host.url}/good.png"),
        )
    assert good.status_code == 202, good.text


def test_refusals_that_need_no_image_come_before_any_fetch(service, native_db, make_user, host):
    # three submits in a row from one address: the refusals are tested, not the submit rate
    with raised_limits(service, "chat_async"):
        _refused_before_fetch(service, make_user, host)


def _refused_before_fetch(service, make_user, host):
    api = f"{service.url}/api/v2"
    requester, owner = make_user("requester", kudos=10_000), make_user("owner")
    poor = make_user("poor", kudos=0)
    with httpx.Client(base_url=api, timeout=60) as client:
        _vision_pop(client, owner.api_key)
        key = {"apikey": requester.api_key}
        unknown = client.post(
            "/generate/chat/async", headers=key, json={**_body(f"{host.url}/drip"), "model": "x"}
        )
        capped = client.post(
            "/generate/chat/async",
            headers=key,
            json=_body(f"{host.url}/drip", horde={"max_kudos": 0.01}),
        )
        upfront = client.post(
            "/generate/chat/async",
            headers={"apikey": poor.api_key},
            json=_body(f"{host.url}/drip", max_tokens=4000, horde={"slow_workers": False}),
        )
    assert unknown.json()["rc"] == "model_not_found", unknown.text
    assert capped.json()["rc"] == "KudosCapExceeded", capped.text
    assert upfront.json()["rc"] == "KudosUpfront", upfront.text
    assert host.requests == []
