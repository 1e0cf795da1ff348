"""The pop+submit client of bench/native_cycles.py, run as its own process (stdlib only, so
it starts fast and shares no interpreter with the server).

``python bench/support/cycle_client.py SPEC`` reads a JSON spec (``urls``: native API roots,
``keys``: one worker key each, ``seconds``: how long to measure, ``warmup``: cycles each
worker runs first, uncounted, ``kind``: text or chat), forks one process per key, lets them
start together after their warm-up, and prints one JSON line: ``{"cycles": N, "seconds": S}``
(cycles finished by every worker, from the common start to the last worker's end). Worker
``i`` talks to ``urls[i % len(urls)]`` over one keep-alive connection and starts no new
cycle once ``seconds`` have passed.
"""

from __future__ import annotations

import json
import multiprocessing
import socket
import subprocess
import sys
import time
from typing import Any
from urllib.parse import urlsplit

FAILURES = (OSError, RuntimeError, ValueError, KeyError)
CONTENT_LENGTH = b"\r\ncontent-length:"


class KeptConnection:
    """HTTP/1.1 POSTs of JSON over one kept-alive socket, written and read by hand.

    The client shares the server's two cores, so its CPU comes off the server's: a request
    through ``http.client`` (its header parsing through the email package) cost the client
    about three times as much. It reads only what the native API's lane answers with: a
    status line, headers with a Content-Length, the body."""

    def __init__(self, host: str, port: int, key: str) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.head = (
            f"Host: {host}:{port}\r\nContent-Type: application/json\r\napikey: {key}\r\n"
        ).encode()
        self.pending = b""

    def post(self, path: str, body: bytes) -> Any:
        self.sock.sendall(
            b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s"
            % (path.encode(), self.head, len(body), body)
        )
        data = self.pending
        while (end := data.find(b"\r\n\r\n")) < 0:
            data += self._recv()
        head, data = data[:end].lower(), data[end + 4 :]
        start = head.find(CONTENT_LENGTH)
        if start < 0:
            raise RuntimeError(f"{path}: an answer without a Content-Length: {head[:300]!r}")
        start += len(CONTENT_LENGTH)
        stop = head.find(b"\r\n", start)
        length = int(head[start : stop if stop >= 0 else len(head)])
        while len(data) < length:
            data += self._recv()
        answer, self.pending = data[:length], data[length:]
        if head[9:12] != b"200":
            raise RuntimeError(f"{path}: {head[9:12].decode()} {answer[:300]!r}")
        return json.loads(answer)

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise RuntimeError("the server closed the connection")
        return chunk

    def close(self) -> None:
        self.sock.close()


def pop_body(name: str, kind: str, declaration: dict[str, Any] | None) -> dict[str, Any]:
    return {"name": name, **(declaration or {})} if kind == "chat" else {"name": name}


def submit_body(job: dict[str, Any], kind: str) -> dict[str, Any]:
    if kind == "chat":
        return {"id": job["id"], "content": "x" * 100, "finish_reason": "stop"}
    return {"id": job["id"], "generation": "x" * 100}


def work(index: int, spec: dict[str, Any], ready: Any, go: Any, results: Any) -> None:
    done, error = 0, ""
    try:
        url = urlsplit(spec["urls"][index % len(spec["urls"])])
        conn = KeptConnection(url.hostname or "127.0.0.1", url.port or 80, spec["keys"][index])
        base = url.path.rstrip("/")
        declaration = spec.get("declaration")
        pop = json.dumps(pop_body(f"cycle-w{index}", spec["kind"], declaration)).encode()

        def cycle() -> None:
            job = conn.post(f"{base}/generate/text/pop", pop)
            if job["id"] is None:
                raise RuntimeError(f"no job for worker {index}: {job}")
            submit = json.dumps(submit_body(job, spec["kind"])).encode()
            conn.post(f"{base}/generate/text/submit", submit)

        for _ in range(spec["warmup"]):
            cycle()
    except FAILURES as exc:  # reported to the parent, which fails the run
        error = repr(exc)
    ready.release()
    go.wait()
    deadline = time.perf_counter() + spec["seconds"]
    try:
        while not error and time.perf_counter() < deadline:
            cycle()
            done += 1
    except FAILURES as exc:
        error = repr(exc)
    results.put((done, time.perf_counter(), error))
    conn.close()


def measure(
    urls: list[str],
    keys: list[str],
    *,
    seconds: float,
    warmup: int,
    kind: str = "text",
    declaration: dict[str, Any] | None = None,
) -> float:
    """Cycles per second of one worker per key against ``urls``, this module run as a
    process of its own (for the benches)."""
    spec = {
        "urls": urls, "keys": keys, "seconds": seconds, "warmup": warmup, "kind": kind,
        "declaration": declaration,
    }  # fmt: skip
    done = subprocess.run(
        [sys.executable, __file__, json.dumps(spec)],
        check=True,
        capture_output=True,
        text=True,
        timeout=seconds * 20 + 120,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return float(result["cycles"]) / float(result["seconds"])


def main() -> None:
    spec = json.loads(sys.argv[1])
    ctx = multiprocessing.get_context("fork")  # nothing but the standard library is loaded
    ready = ctx.Semaphore(0)
    go = ctx.Event()
    results = ctx.Queue()
    procs = [
        ctx.Process(target=work, args=(i, spec, ready, go, results))
        for i in range(len(spec["keys"]))
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    started = time.perf_counter()
    go.set()
    finished = [results.get() for _ in procs]
    for p in procs:
        p.join()
    errors = [error for _, _, error in finished if error]
    if errors:
        raise SystemExit(f"a worker failed: {errors[0]}")
    cycles = sum(done for done, _, _ in finished)
    seconds = max(end for _, end, _ in finished) - started
    print(json.dumps({"cycles": cycles, "seconds": seconds}))


if __name__ == "__main__":
    main()
