"""The worker's JSON calls over plain keep-alive HTTP/1.1: the pop, the submit, the backend's
completion.

Each of a plain job's three calls is on its completion's critical path, and httpx spends about
three times the CPU of the standard library's ``http.client`` on one (bench/worker_http.py).
``JsonHttp`` keeps idle connections for reuse, drops one the server closed while it idled
before sending on it, and sends once more at once when the server closed a reused connection
as the request went out (a keep-alive race: the request was not read). ``cut`` shuts every
connection, so a call waiting on one (a long-poll pop) ends at once. Proxies are found as
httpx finds them (``urllib.request.getproxies``: ``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``);
an ``http://`` proxy only.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import select
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit
from urllib.request import getproxies, proxy_bypass

import certifi

__all__ = ["Answer", "CallFailed", "CallTimedOut", "JsonHttp", "StatusError"]

STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)
"""What a send on a connection the server closed meanwhile raises, before any answer."""


def _encode(body: Any) -> bytes:
    """``body`` as httpx's ``json=`` sends it: compact UTF-8, NaN and infinity refused."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


class CallFailed(Exception):
    """The call got no answer: the connection was refused, broke, or was cut."""


class CallTimedOut(CallFailed):
    """No answer within the call's timeout."""


class StatusError(Exception):
    """An answer of 400 or more, where the caller wanted a success."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(f"{answer.status} {answer.reason}: {answer.text[:300]}")
        self.answer = answer


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return json.loads(self.content)

    def raise_for_status(self) -> None:
        if self.status >= 400:
            raise StatusError(self)


@dataclass(frozen=True)
class _Route:
    """Where connections go (the origin, or the proxy before it) and the request target's
    prefix (an absolute URL through a plain-HTTP proxy, else nothing)."""

    tls: bool
    host: str
    port: int
    prefix: str
    tunnel: tuple[str, int] | None
    proxy_headers: dict[str, str]


def _route(base_url: str) -> _Route:
    url = urlsplit(base_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"not an http(s) URL: {base_url!r}")
    tls = url.scheme == "https"
    port = url.port or (443 if tls else 80)
    path = url.path.rstrip("/")
    proxy = None if proxy_bypass(url.hostname) else _proxy_url(url.scheme)
    if proxy is None:
        return _Route(tls, url.hostname, port, path, None, {})
    via = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if via.scheme != "http" or not via.hostname:
        raise ValueError(f"the worker reaches {base_url} through an http:// proxy only: {proxy}")
    headers = {}
    if via.username:
        user = f"{unquote(via.username)}:{unquote(via.password or '')}"
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(user.encode()).decode()
    if tls:  # a CONNECT tunnel through the proxy, TLS inside it
        return _Route(True, via.hostname, via.port or 80, path, (url.hostname, port), headers)
    origin = f"http://{url.hostname}:{port}"
    return _Route(False, via.hostname, via.port or 80, origin + path, None, headers)


def _proxy_url(scheme: str) -> str | None:
    proxies = getproxies()
    return proxies.get(scheme) or proxies.get("all")


def _dropped(sock: socket.socket | None) -> bool:
    """An idle connection the server closed (or wrote to unasked) reads as ready."""
    if sock is None:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class JsonHttp:
    """JSON calls to one server root (``http://host:port[/path]``), thread-safe."""

    def __init__(self, base_url: str, *, headers: dict[str, str], timeout: float) -> None:
        self.timeout = timeout
        self._route = _route(base_url)
        self._headers = dict(headers)
        if not self._route.tunnel:
            self._headers.update(self._route.proxy_headers)
        self._tls = ssl.create_default_context(cafile=certifi.where()) if self._route.tls else None
        """httpx's trust store: certifi's bundle, not the system's."""
        self._idle: list[http.client.HTTPConnection] = []
        self._open: set[http.client.HTTPConnection] = set()
        self._lock = threading.Lock()
        self._cut = False

    def is_closed(self) -> bool:
        """Cut or closed: every call is refused (a method, read afresh each time)."""
        return self._cut

    def request(
        self, method: str, path: str, body: Any = None, *, timeout: float | None = None
    ) -> Answer:
        """Send ``body`` as JSON (None: no body) and read the whole answer; raises
        ``CallFailed`` (``CallTimedOut`` past ``timeout`` seconds a step) without one."""
        seconds = self.timeout if timeout is None else timeout
        headers = self._headers
        data = None
        if body is not None:
            data = _encode(body)
            headers = {**headers, "Content-Type": "application/json"}
        target = self._route.prefix + path
        for fresh_only in (False, True):
            connection, reused = self._take(seconds, fresh_only)
            try:
                connection.request(method, target, body=data, headers=headers)
                response = connection.getresponse()
                answer = Answer(response.status, response.reason, response.read())
            except TimeoutError as exc:
                self._drop(connection)
                raise CallTimedOut(f"no answer within {seconds:.1f} s") from exc
            except STALE as exc:
                self._drop(connection)
                if reused and not fresh_only and not self._cut:
                    continue  # closed by the server as it idled: the request was not read
                raise CallFailed(f"{type(exc).__name__}: {exc}") from exc
            except (OSError, http.client.HTTPException) as exc:
                self._drop(connection)
                raise CallFailed(f"{type(exc).__name__}: {exc}") from exc
            if response.will_close:
                self._drop(connection)
            else:
                self._give_back(connection)
            return answer
        raise AssertionError("unreachable")

    def cut(self) -> None:
        """Shut every connection both ways (a call waiting on one ends at once) and refuse
        new calls."""
        with self._lock:
            self._cut = True
            idle, self._idle = self._idle, []
            self._open.difference_update(idle)
            busy = list(self._open)  # closed by their calls, which fail or give them back
        for connection in busy:
            _shut(connection)
        for connection in idle:
            connection.close()

    close = cut

    def _take(self, seconds: float, fresh_only: bool) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._cut:
                raise CallFailed("the client is closed")
            while self._idle and not fresh_only:
                connection = self._idle.pop()
                if not _dropped(connection.sock):
                    assert connection.sock is not None
                    connection.sock.settimeout(seconds)
                    return connection, True
                self._open.discard(connection)
                connection.close()
            connection = self._connection(seconds)
            self._open.add(connection)
        try:
            connection.connect()
        except OSError as exc:
            self._drop(connection)
            if isinstance(exc, TimeoutError):
                raise CallTimedOut(f"no connection within {seconds:.1f} s") from exc
            raise CallFailed(f"{type(exc).__name__}: {exc}") from exc
        with self._lock:
            if self.is_closed():  # cut while it connected: cut this one too
                _shut(connection)
        return connection, False

    def _connection(self, seconds: float) -> http.client.HTTPConnection:
        route = self._route
        connection: http.client.HTTPConnection
        if self._tls is not None:
            connection = http.client.HTTPSConnection(
                route.host, route.port, timeout=seconds, context=self._tls
            )
        else:
            connection = http.client.HTTPConnection(route.host, route.port, timeout=seconds)
        if route.tunnel is not None:
            connection.set_tunnel(*route.tunnel, headers=route.proxy_headers)
        return connection

    def _give_back(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if self._cut:
                self._open.discard(connection)
                connection.close()
            else:
                self._idle.append(connection)

    def _drop(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            self._open.discard(connection)
        connection.close()


def _shut(connection: http.client.HTTPConnection) -> None:
    """Shut a connection's socket both ways (a read waiting on it in another thread ends at
    once; closing it would not wake that read)."""
    sock = connection.sock
    if sock is not None:
        with contextlib.suppress(OSError):  # closed meanwhile
            sock.shutdown(socket.SHUT_RDWR)
