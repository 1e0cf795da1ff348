"""The worker's plain-HTTP JSON client (``runtime.worker.json_http``) against a scripted
server on a real socket: what it does with a connection the server closed, a call the
server never answers, a cut, a timeout and a proxy."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from runtime.worker.json_http import Answer, CallFailed, CallTimedOut, JsonHttp, StatusError

ANSWER = b'{"ok":true}'
Action = str
"""What the server does with a request: "answer", "answer-then-close" (answers, then closes
the connection as an idle keep-alive one is closed), "drop" (closes without answering) or
"hold" (never answers)."""


@dataclass
class Seen:
    connection: int
    request_line: str
    headers: dict[str, str]
    body: bytes


@dataclass
class ScriptedServer:
    """Answers each request as ``script(connection index, request index on it)`` says."""

    script: Callable[[int, int], Action]
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0
    closed: threading.Event = field(default_factory=threading.Event)
    sock: socket.socket = field(default_factory=socket.socket)

    def start(self) -> ScriptedServer:
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            index = self.connections
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn, index), daemon=True).start()

    def _serve(self, conn: socket.socket, index: int) -> None:
        with conn:
            reader = conn.makefile("rb")
            for number in range(1000):
                line = reader.readline().decode("latin-1").strip()
                if not line:
                    return
                headers = {}
                while (header := reader.readline().decode("latin-1").strip()) != "":
                    name, _, value = header.partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = reader.read(int(headers.get("content-length", "0")))
                self.seen.append(Seen(index, line, headers, body))
                action = self.script(index, number)
                if action == "hold":
                    reader.read()  # until the client's side is shut
                    return
                if action == "drop":
                    self.closed.set()
                    return
                head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(ANSWER)}\r\n\r\n"
                conn.sendall(head.encode() + ANSWER)
                if action == "answer-then-close":
                    conn.shutdown(socket.SHUT_RDWR)
                    self.closed.set()
                    return

    def stop(self) -> None:
        self.sock.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[int, int], Action]], ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(script: Callable[[int, int], Action]) -> ScriptedServer:
        servers.append(ScriptedServer(script).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


pytestmark = pytest.mark.usefixtures("no_proxy")


def _client(url: str, timeout: float = 5.0) -> JsonHttp:
    return JsonHttp(url, headers={"apikey": "k"}, timeout=timeout)


def test_calls_share_one_connection_and_send_json(serve: Callable) -> None:
    server = serve(lambda conn, number: "answer")
    client = _client(server.url + "/api")
    try:
        for n in range(3):
            answer = client.request("POST", "/v2/pop", {"n": n, "text": "é"})
            assert (answer.status, answer.json()) == (200, {"ok": True})
    finally:
        client.close()
    assert server.connections == 1
    assert [s.request_line for s in server.seen] == ["POST /api/v2/pop HTTP/1.1"] * 3
    assert server.seen[0].headers["apikey"] == "k"
    assert server.seen[0].headers["content-type"] == "application/json"
    assert json.loads(server.seen[2].body) == {"n": 2, "text": "é"}


def test_a_connection_the_server_closed_while_idle_costs_the_next_call_nothing(
    serve: Callable,
) -> None:
    """uvicorn closes a keep-alive connection idle for 5 s; the next call gets its answer on
    another, and the server sees each request once (whether the client saw the close before
    sending, or sent and met it: the next test)."""
    server = serve(lambda conn, number: "answer-then-close")
    client = _client(server.url)
    try:
        client.request("POST", "/submit", {"id": 1})
        assert server.closed.wait(5)
        answer = client.request("POST", "/submit", {"id": 2})
    finally:
        client.close()
    assert answer.status == 200
    assert server.connections == 2
    assert [json.loads(s.body)["id"] for s in server.seen] == [1, 2]


def test_a_reused_connection_closed_as_the_request_went_out_is_sent_again(
    serve: Callable,
) -> None:
    """The keep-alive race: the server closes a reused connection without an answer just as
    the request goes out; the call is made once more at once, on a new connection."""
    server = serve(lambda conn, number: "drop" if (conn, number) == (0, 1) else "answer")
    client = _client(server.url)
    try:
        client.request("POST", "/submit", {"id": 1})
        answer = client.request("POST", "/submit", {"id": 2})  # not CallFailed: sent again
    finally:
        client.close()
    assert answer.json() == {"ok": True}
    assert [(s.connection, json.loads(s.body)["id"]) for s in server.seen] == [
        (0, 1),
        (0, 2),
        (1, 2),
    ]


def test_a_new_connection_closed_without_an_answer_fails_the_call(serve: Callable) -> None:
    server = serve(lambda conn, number: "drop")
    client = _client(server.url)
    with pytest.raises(CallFailed, match="RemoteDisconnected"):
        client.request("POST", "/pop", {})
    client.close()
    assert server.connections == 1  # not sent again


def test_cut_ends_a_waiting_call_at_once_and_refuses_new_ones(serve: Callable) -> None:
    server = serve(lambda conn, number: "hold")
    client = _client(server.url, timeout=60)
    failed: list[BaseException] = []

    def waiting_pop() -> None:
        try:
            client.request("POST", "/pop", {"wait": 60})
        except CallFailed as exc:
            failed.append(exc)

    thread = threading.Thread(target=waiting_pop)
    thread.start()
    deadline = time.monotonic() + 5
    while not server.seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.seen, "the call never reached the server"
    client.cut()
    thread.join(5)
    assert not thread.is_alive()
    assert failed
    assert not isinstance(failed[0], CallTimedOut)
    assert client.is_closed()
    with pytest.raises(CallFailed, match="closed"):
        client.request("POST", "/pop", {})


def test_no_answer_within_the_timeout_is_a_timeout(serve: Callable) -> None:
    server = serve(lambda conn, number: "hold")
    client = _client(server.url)
    with pytest.raises(CallTimedOut):
        client.request("POST", "/pop", {}, timeout=0.2)
    client.close()


def test_a_refused_connection_fails_the_call() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    client = _client(f"http://127.0.0.1:{port}")
    with pytest.raises(CallFailed, match="ConnectionRefused"):
        client.request("GET", "/v1/models")


def test_status_errors_and_json_as_httpx_sends_it(serve: Callable) -> None:
    server = serve(lambda conn, number: "answer")
    client = _client(server.url)
    with pytest.raises(ValueError, match="JSON compliant"):
        client.request("POST", "/submit", {"value": float("nan")})  # httpx refuses it too
    client.close()
    assert not server.seen
    with pytest.raises(StatusError, match="429 Too Many"):
        Answer(429, "Too Many Requests", b'{"message": "slow down"}').raise_for_status()


def test_an_http_proxy_from_the_environment_is_used_and_no_proxy_bypasses_it(
    serve: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = serve(lambda conn, number: "answer")
    monkeypatch.setenv("HTTP_PROXY", proxy.url.replace("http://", "http://user:pw@"))
    client = _client("http://horde.example:7001/api")
    try:
        client.request("POST", "/v2/pop", {})
    finally:
        client.close()
    (seen,) = proxy.seen
    assert seen.request_line == "POST http://horde.example:7001/api/v2/pop HTTP/1.1"
    assert seen.headers["proxy-authorization"] == "Basic dXNlcjpwdw=="  # user:pw

    direct = serve(lambda conn, number: "answer")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    client = _client(direct.url)
    try:
        client.request("POST", "/pop", {})
    finally:
        client.close()
    assert len(direct.seen) == 1
    assert len(proxy.seen) == 1


def test_only_an_http_proxy_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "https://proxy.example:3128")
    with pytest.raises(ValueError, match="http:// proxy only"):
        _client("https://horde.example")
