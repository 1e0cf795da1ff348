"""Fetching an image URL at submit without reaching inside the deployment's network.

Every hop (the URL, then each redirect) is resolved here and refused unless every
address is public: loopback, private, link-local, multicast, reserved, shared and
unspecified ranges are refused (IPv4-mapped IPv6 included). The connection then goes to
the checked address itself (the Host header and TLS SNI keep the name, so certificates
are verified against it), so a second DNS answer cannot swap in an inside address.
Loopback is reachable only with ``allow_loopback``, a test-only setting.

``post_public`` sends a webhook through the same guards: https only (plain http only to
loopback, under the same test-only setting), the address checked and pinned, no redirect
followed.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from generated.chat.names import LIMIT_MAX_IMAGE_BYTES
from generated.storage import FETCH_TIMEOUT_SECONDS, INTAKE_CAPS, MAX_REDIRECTS

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


def fetch_public(url: str, policy: FetchPolicy) -> bytes:
    """The body of ``url`` (redirects followed and checked), within the policy's limits."""
    deadline = time.monotonic() + policy.timeout_seconds
    with httpx.Client(follow_redirects=False, timeout=policy.timeout_seconds) as client:
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
                raise FetchRefused(f"the URL could not be fetched ({type(exc).__name__})") from None
        raise FetchRefused(f"more than {policy.max_redirects} redirects")


def post_public(url: str, body: bytes, policy: FetchPolicy) -> int:
    """POST ``body`` (JSON) to ``url`` through the address guards; returns the HTTP status.

    FetchRefused when the URL is refused, Unreachable when the POST fails; a redirect is
    not followed."""
    if urlsplit(url).scheme != "https" and not policy.allow_loopback:
        raise FetchRefused("webhooks need to point to an https endpoint")
    pinned, headers, extensions = _pinned(url, policy)
    headers = {**headers, "Content-Type": "application/json"}
    try:
        with httpx.Client(follow_redirects=False, timeout=policy.timeout_seconds) as client:
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
        if time.monotonic() > deadline:
            raise FetchRefused("the image was not received in time")
    return bytes(body)
