"""Webhook delivery: the image fetch's address guards, bounded attempts, no retry of a
refused URL (runtime.native.queue.webhooks, runtime.native.objects.fetch.post_public)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from generated.defences import WEBHOOK_ATTEMPTS as ATTEMPTS
from runtime.native.objects.fetch import FetchPolicy, FetchRefused, post_public
from runtime.native.queue.webhooks import Delivery, WebhookSender, deliver

LOOPBACK = FetchPolicy(timeout_seconds=3, allow_loopback=True)


class _Answering(BaseHTTPRequestHandler):
    status: ClassVar[int] = 200
    calls: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        type(self).calls.append(self.rfile.read(length))
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def _serve(status: int) -> Iterator[tuple[str, list[bytes]]]:
    calls: list[bytes] = []
    handler = type("Handler", (_Answering,), {"status": status, "calls": calls})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", calls
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def failing() -> Iterator[tuple[str, list[bytes]]]:
    yield from _serve(500)


@pytest.fixture
def answering() -> Iterator[tuple[str, list[bytes]]]:
    yield from _serve(200)


def test_a_webhook_needs_an_https_url_outside_the_test_switch() -> None:
    with pytest.raises(FetchRefused, match="https"):
        post_public("http://example.com/hook", b"{}", FetchPolicy())


@pytest.mark.parametrize("host", ["127.0.0.1", "10.1.2.3", "169.254.169.254", "[::1]"])
def test_a_webhook_to_an_inside_address_is_refused_before_any_connection(host: str) -> None:
    with pytest.raises(FetchRefused, match="resolves to a"):
        post_public(f"https://{host}/hook", b"{}", FetchPolicy())


def test_a_refused_url_is_not_retried_and_a_failing_one_is_tried_a_bounded_number_of_times(
    failing: tuple[str, list[bytes]],
) -> None:
    url, calls = failing
    assert deliver(Delivery(url, {"id": "g"}), LOOPBACK) is False
    assert len(calls) == ATTEMPTS
    assert deliver(Delivery(url, {"id": "g"}), FetchPolicy()) is False  # loopback refused
    assert len(calls) == ATTEMPTS


def test_the_sender_posts_each_queued_delivery_once_off_the_callers_thread(
    answering: tuple[str, list[bytes]],
) -> None:
    url, calls = answering
    sender = WebhookSender(size=4)
    sender.send(Delivery(url, {"id": "g1"}), allow_loopback=True)
    sender.send(Delivery(url, {"id": "g2"}), allow_loopback=True)
    sender.drain()
    assert sorted(calls) == [b'{"id": "g1"}', b'{"id": "g2"}']
