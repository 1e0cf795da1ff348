"""Fetching an image URL at submit without reaching inside the deployment's network.

Every hop (the URL, each redirect) is resolved here and refused unless every address is
public, and the connection goes to the checked address, so a second DNS answer cannot swap
in an inside one; ``post_public`` sends webhooks through the same guards. One deadline
covers connect to body, and fetches run on ``FETCHES``, a small pool shared fairly between
sources (``runtime.fair_shares``), so slow hosts hold neither request threads nor others'.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpcore
import httpx

from generated.chat.names import LIMIT_MAX_IMAGE_BYTES
from generated.defences import (
    FETCH_QUEUE,
    FETCH_QUEUED_PER_SOURCE,
    FETCH_RUNNING_PER_SOURCE,
    FETCH_WORKERS,
)
from generated.errors import IntakeBusy, TooManyImageFetches
from generated.storage import FETCH_TIMEOUT_SECONDS, INTAKE_CAPS, MAX_REDIRECTS
from runtime.fair_shares import FairPool, PoolFull, ShareFull

T = TypeVar("T")

SCHEMES = {"http": 80, "https": 443}
REDIRECTS = {301, 302, 303, 307, 308}
CHUNK = 64 * 1024


class FetchRefused(Exception):
    """The URL was not fetched, or not whole; ``reason`` says why in the client's words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Unreachable(FetchRefused):
    """The URL passed the guards but the connection or the exchange failed (retriable)."""


@dataclass(frozen=True)
class FetchPolicy:
    timeout_seconds: float = FETCH_TIMEOUT_SECONDS
    max_bytes: int = INTAKE_CAPS[LIMIT_MAX_IMAGE_BYTES]
    max_redirects: int = MAX_REDIRECTS
    allow_loopback: bool = False  # tests only


def _refusal(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    kinds = [
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("unspecified", address.is_unspecified),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
        ("not public", not address.is_global),
    ]
    return next((kind for kind, hit in kinds if hit), None)


def checked_address(host: str, port: int, policy: FetchPolicy) -> str:
    """One address of ``host`` to connect to; FetchRefused unless every address is allowed."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise FetchRefused(f"the host {host!r} could not be resolved ({exc})") from None
    addresses = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        refusal = _refusal(address)
        if refusal == "loopback" and policy.allow_loopback:
            refusal = None
        if refusal is not None:
            raise FetchRefused(f"the host {host!r} resolves to a {refusal} address")
        addresses.append(address)
    if not addresses:
        raise FetchRefused(f"the host {host!r} has no address")
    return str(addresses[0])


def _pinned(url: str, policy: FetchPolicy) -> tuple[str, dict[str, str], dict[str, str]]:
    """The URL aimed at a checked address, its Host header and the TLS SNI extension."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES or not parts.hostname:
        raise FetchRefused("only http(s) URLs with a host are fetched")
    try:
        port = parts.port or SCHEMES[parts.scheme]
    except ValueError:
        raise FetchRefused("the URL's port is not valid") from None
    address = checked_address(parts.hostname, port, policy)
    netloc = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    host_header = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
    return pinned, {"Host": host_header}, extensions


class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every wait is cut to what is left of one deadline."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: float) -> None:
        self._inner = inner
        self._deadline = deadline

    def _left(self, timeout: float | None, error: type[Exception]) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise error("the deadline passed")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = self._left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._inner.start_tls(ssl_context, server_hostname, left), self._deadline
        )

    def get_extra_info(self, info: str) -> object:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync sockets under one wall-clock deadline (connect, TLS, every read and
    write): httpx's own timeouts are per operation, so a drip of one byte a second never
    trips them."""

    def __init__(self, deadline: float) -> None:
        self._inner = httpcore.SyncBackend()
        self._deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise httpcore.ConnectTimeout("the deadline passed")
        wait = left if timeout is None else min(timeout, left)
        stream = self._inner.connect_tcp(host, port, wait, local_address, socket_options)
        return _DeadlineStream(stream, self._deadline)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _client(deadline: float, policy: FetchPolicy) -> httpx.Client:
    """A client whose every exchange ends by ``deadline`` (monotonic)."""
    transport = httpx.HTTPTransport(retries=0)
    transport._pool = httpcore.ConnectionPool(  # the same pool, on the deadline's sockets
        ssl_context=httpx.create_ssl_context(), network_backend=DeadlineBackend(deadline)
    )
    return httpx.Client(follow_redirects=False, timeout=policy.timeout_seconds, transport=transport)


class FetchPool:
    """The fetch threads, shared fairly between sources: ``run`` refuses at once when the
    source holds its whole share (TooManyImageFetches) or the pool has no place
    (IntakeBusy)."""

    def __init__(
        self,
        workers: int = FETCH_WORKERS,
        queued: int = FETCH_QUEUE,
        running_per_source: int = FETCH_RUNNING_PER_SOURCE,
        queued_per_source: int = FETCH_QUEUED_PER_SOURCE,
    ) -> None:
        self.pool = FairPool(
            "horde-fetch",
            workers=workers,
            queued=queued,
            running_per_source=running_per_source,
            queued_per_source=queued_per_source,
        )

    def run(self, source: str, work: Callable[[], T]) -> T:
        """``work()`` on a pool thread for ``source`` (it must end by its own deadline)."""
        try:
            future = self.pool.submit((source,), work)
        except ShareFull as full:
            seconds = TooManyImageFetches.default_retry_after
            raise TooManyImageFetches(count=full.held, limit=full.limit, seconds=seconds) from None
        except PoolFull:
            raise IntakeBusy(seconds=IntakeBusy.default_retry_after) from None
        return future.result()


FETCHES = FetchPool()


def fetch_public(url: str, policy: FetchPolicy, deadline: float | None = None) -> bytes:
    """The body of ``url`` (redirects followed and checked), within the policy's limits and
    by ``deadline`` (monotonic; the policy's timeout from now when None)."""
    if deadline is None:
        deadline = time.monotonic() + policy.timeout_seconds
    if time.monotonic() >= deadline:
        raise FetchRefused(_late(policy))
    with _client(deadline, policy) as client:
        for _hop in range(policy.max_redirects + 1):
            pinned, headers, extensions = _pinned(url, policy)
            request = client.build_request("GET", pinned, headers=headers, extensions=extensions)
            try:
                response = client.send(request, stream=True)
                try:
                    if response.status_code in REDIRECTS and "location" in response.headers:
                        url = urljoin(url, response.headers["location"])
                        continue
                    if response.status_code != 200:
                        raise FetchRefused(f"the URL answered HTTP {response.status_code}")
                    return _read_capped(response, policy.max_bytes, deadline)
                finally:
                    response.close()
            except httpx.HTTPError as exc:
                if time.monotonic() >= deadline:
                    raise FetchRefused(_late(policy)) from None
                raise FetchRefused(f"the URL could not be fetched ({type(exc).__name__})") from None
        raise FetchRefused(f"more than {policy.max_redirects} redirects")


def _late(policy: FetchPolicy) -> str:
    return f"the image was not received in time ({policy.timeout_seconds:g} seconds)"


def post_public(url: str, body: bytes, policy: FetchPolicy) -> int:
    """POST ``body`` (JSON) to ``url`` through the address guards; returns the HTTP status.

    FetchRefused when the URL is refused, Unreachable when the POST fails; a redirect is
    not followed."""
    if urlsplit(url).scheme != "https" and not policy.allow_loopback:
        raise FetchRefused("webhooks need to point to an https endpoint")
    pinned, headers, extensions = _pinned(url, policy)
    headers = {**headers, "Content-Type": "application/json"}
    try:
        with _client(time.monotonic() + policy.timeout_seconds, policy) as client:
            response = client.post(pinned, content=body, headers=headers, extensions=extensions)
            return response.status_code
    except httpx.HTTPError as exc:
        raise Unreachable(f"the URL could not be reached ({type(exc).__name__})") from None


def _read_capped(response: httpx.Response, max_bytes: int, deadline: float) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise FetchRefused(f"the image is {declared} bytes, over the limit of {max_bytes}")
    body = bytearray()
    for chunk in response.iter_bytes(CHUNK):
        body += chunk
        if len(body) > max_bytes:
            raise FetchRefused(f"the image is over the limit of {max_bytes} bytes")
        if time.monotonic() > deadline:  # the sockets end at the deadline too
            raise FetchRefused("the image was not received in time")
    return bytes(body)
