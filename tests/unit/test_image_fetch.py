"""Fetching image URLs at submit: public addresses only (loopback only through the
test-only setting), redirects checked hop by hop, a size cap and a deadline. Images are
served by a real local HTTP server."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from PIL import Image

from generated.errors import ImageValidationFailed
from runtime.native.objects.fetch import FetchPolicy, FetchRefused, checked_address, fetch_public
from runtime.native.objects.intake import IntakePolicy, take_in_images
from runtime.stores.objects_fs import FilesystemObjectStore


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(out, format="PNG")
    return out.getvalue()


PNG = _png()
LOOPBACK = FetchPolicy(allow_loopback=True)


class Handler(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, dict[str, str], bytes]] = {}  # noqa: RUF012

    def do_GET(self) -> None:
        if self.path == "/stall":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b"x")
            self.wfile.flush()
            threading.Event().wait(3)
            return
        status, headers, body = self.routes.get(self.path, (404, {}, b""))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if "Transfer-Encoding" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if "Transfer-Encoding" in headers:
            self.wfile.write(f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
        else:
            self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    port = httpd.server_address[1]
    Handler.routes = {
        "/cat.png": (200, {"Content-Type": "image/png"}, PNG),
        "/hop": (302, {"Location": "/cat.png"}, b""),
        "/to-private": (302, {"Location": "http://10.1.2.3/cat.png"}, b""),
        "/to-metadata": (301, {"Location": "http://169.254.169.254/latest"}, b""),
        "/loop": (302, {"Location": "/loop"}, b""),
        "/big": (200, {}, b"\0" * 5000),
        "/big-chunked": (200, {"Transfer-Encoding": "chunked"}, b"\0" * 5000),
        "/gone": (410, {}, b""),
    }
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_public_image_url_is_fetched(server: str) -> None:
    assert fetch_public(f"{server}/cat.png", LOOPBACK) == PNG


def test_redirects_are_followed(server: str) -> None:
    assert fetch_public(f"{server}/hop", LOOPBACK) == PNG


def test_loopback_is_refused_by_default(server: str) -> None:
    with pytest.raises(FetchRefused, match="loopback"):
        fetch_public(f"{server}/cat.png", FetchPolicy())


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("10.0.0.1", "private"),
        ("192.168.1.1", "private"),
        ("172.16.5.5", "private"),
        ("169.254.169.254", "link-local"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "not public"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("fd00::1", "private"),
        ("::ffff:10.0.0.1", "private"),
        ("localhost", "loopback"),
    ],
)
def test_addresses_inside_the_network_are_refused(host: str, kind: str) -> None:
    with pytest.raises(FetchRefused, match=kind):
        checked_address(host, 443, FetchPolicy())


def test_the_test_setting_opens_loopback_only() -> None:
    assert checked_address("127.0.0.1", 80, LOOPBACK) == "127.0.0.1"
    with pytest.raises(FetchRefused, match="private"):
        checked_address("10.0.0.1", 80, LOOPBACK)


@pytest.mark.parametrize("path", ["/to-private", "/to-metadata"])
def test_a_redirect_inside_the_network_is_refused(server: str, path: str) -> None:
    with pytest.raises(FetchRefused, match=r"private|link-local"):
        fetch_public(f"{server}{path}", LOOPBACK)


def test_endless_redirects_are_refused(server: str) -> None:
    with pytest.raises(FetchRefused, match="redirects"):
        fetch_public(f"{server}/loop", LOOPBACK)


@pytest.mark.parametrize("path", ["/big", "/big-chunked"])
def test_the_size_cap_holds_with_and_without_content_length(server: str, path: str) -> None:
    with pytest.raises(FetchRefused, match="over the limit of 1000"):
        fetch_public(f"{server}{path}", FetchPolicy(max_bytes=1000, allow_loopback=True))


def test_an_error_status_is_refused(server: str) -> None:
    with pytest.raises(FetchRefused, match="HTTP 410"):
        fetch_public(f"{server}/gone", LOOPBACK)


def test_a_stalled_server_is_given_up(server: str) -> None:
    with pytest.raises(FetchRefused, match=r"could not be fetched|in time"):
        fetch_public(f"{server}/stall", FetchPolicy(timeout_seconds=0.3, allow_loopback=True))


@pytest.mark.parametrize("url", ["ftp://example.com/a.png", "file:///etc/passwd", "https:///x"])
def test_other_schemes_are_refused(url: str) -> None:
    with pytest.raises(FetchRefused, match="only http"):
        fetch_public(url, FetchPolicy())


def test_intake_of_url_parts(server: str, tmp_path: Path) -> None:
    store = FilesystemObjectStore(tmp_path, base_url="http://horde", secret="s")
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": ""}}]}]
    messages[0]["content"][0]["image_url"]["url"] = f"{server}/hop"
    allowed = IntakePolicy(fetch=LOOPBACK)
    (image,) = take_in_images(messages, store, allowed).images
    assert (image.width, image.height) == (8, 8)
    messages[0]["content"][0]["image_url"]["url"] = f"{server}/cat.png"
    with pytest.raises(ImageValidationFailed, match=r"messages\[0\]\.content\[0\]: .*loopback"):
        take_in_images(messages, store)
    messages[0]["content"][0]["image_url"]["url"] = f"{server}/to-private"
    with pytest.raises(ImageValidationFailed, match="private"):
        take_in_images(messages, store, allowed)
