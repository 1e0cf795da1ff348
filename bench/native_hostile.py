"""What hostile clients cost the native API, in a process of its own (bench/native_stack.py:
``horde-chat native``, rate limits off). Printed figures, never pass/fail; each scenario
starts from the process's peak resident memory reset to its current size.

- ``native_slow_bodies_users_max_ms``: while SLOW_CLIENTS connections (more than the API's
  client threads) each send a chat submit's head and then its body a byte a second, the
  slowest of PROBES ``GET /users`` (a client route); a probe not answered within
  PROBE_TIMEOUT counts as that;
- ``native_header_flood_hwm_growth_mb``: two connections each sending up to 100 MB of
  headers (until the API answers); how far the peak resident memory rose;
- ``native_image_hwm_mb[N requests of I images]``: chat submits (dry runs) whose I images
  are PNGs of 5000x5000 pixels (about 84 KB each, so 8 of them fit a 1 MB body), N sent at
  once; the process's peak resident memory after them, and how they were answered.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.front_stack import bench_users, chat_declaration
from bench.native_stack import NativeProcess, native_process
from runtime.native.asgi import THREADS

SLOW_CLIENTS = THREADS + 6
PROBES = 5
PROBE_TIMEOUT = 20.0
HEADER_FLOOD_BYTES = 100 * 1024 * 1024
MODEL = "bench-vision"
SIDE = 5000
IMAGE_RUNS = ((1, 8), (10, 8), (10, 2))
"""(requests at once, images per request)."""
CHAT_HEAD = (
    b"POST /api/v2/generate/chat/async HTTP/1.1\r\nhost: horde\r\napikey: 0000000000\r\n"
    b"content-type: application/json\r\ncontent-length: 400\r\n\r\n"
)


def memory(pid: int, field: str) -> int:
    """``field`` (VmRSS, VmHWM) of the process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    raise RuntimeError(f"no {field} for {pid}")


def reset_peak(pid: int) -> int:
    """Reset the process's peak resident memory to its current size (Linux 4.0+); that."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return memory(pid, "VmRSS")


def host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def slow_bodies(native: NativeProcess) -> None:
    stop = threading.Event()

    def drip(sock: socket.socket) -> None:
        try:
            sock.sendall(CHAT_HEAD)
            while not stop.wait(1.0):
                sock.sendall(b" ")
        except OSError:
            pass  # answered (408) and closed
        finally:
            sock.close()

    socks = [socket.create_connection(host_port(native.url)) for _ in range(SLOW_CLIENTS)]
    drippers = [threading.Thread(target=drip, args=(s,), daemon=True) for s in socks]
    for dripper in drippers:
        dripper.start()
    time.sleep(2.0)  # every head sent and read
    slowest = 0.0
    outcomes: Counter[str] = Counter()
    for _ in range(PROBES):
        started = time.monotonic()
        try:
            answer = httpx.get(f"{native.url}/api/v2/users", timeout=PROBE_TIMEOUT)
            outcomes[str(answer.status_code)] += 1
        except httpx.TimeoutException:
            outcomes["timed out"] += 1
        slowest = max(slowest, time.monotonic() - started)
    stop.set()
    for dripper in drippers:
        dripper.join(10)
    print(f"slow bodies: {SLOW_CLIENTS} dripping; /users answered {dict(outcomes)}", flush=True)
    print(f"figure: native_slow_bodies_users_max_ms = {slowest * 1000:.0f} ms", flush=True)


def header_flood(native: NativeProcess) -> None:
    before = reset_peak(native.pid)
    answers: list[str] = []
    line = b"x-pad: " + b"a" * 8000 + b"\r\n"

    def flood() -> None:
        with socket.create_connection(host_port(native.url)) as sock:
            sock.sendall(b"GET /api/v2/status/heartbeat HTTP/1.1\r\nhost: horde\r\n")
            sent = 0
            try:
                while sent < HEADER_FLOOD_BYTES:
                    sock.sendall(line)
                    sent += len(line)
                sock.sendall(b"\r\n")
            except OSError:
                pass
            sock.settimeout(10)
            try:
                status = sock.recv(64).split(b"\r\n")[0].decode()
            except OSError as exc:
                status = type(exc).__name__
            answers.append(f"{status} after {sent / 1024 / 1024:.1f} MB")

    floods = [threading.Thread(target=flood) for _ in range(2)]
    for thread in floods:
        thread.start()
    for thread in floods:
        thread.join()
    growth = memory(native.pid, "VmHWM") - before
    print(f"header flood: {answers}", flush=True)
    print(f"figure: native_header_flood_hwm_growth_mb = {growth} MB", flush=True)


def vision_worker_online(native: NativeProcess) -> None:
    _requester, owner = bench_users(native.sessions)
    pop = httpx.post(
        f"{native.url}/api/v2/generate/text/pop",
        headers={"apikey": owner},
        json=chat_declaration("bench-vision-worker", MODEL),
        timeout=30,
    )
    pop.raise_for_status()


def images_body(images: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (SIDE, SIDE), (200, 30, 30)).save(out, format="PNG", optimize=True)
    url = "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()
    parts = [{"type": "image_url", "image_url": {"url": url}} for _ in range(images)]
    messages = [{"role": "user", "content": [{"type": "text", "text": "Look."}, *parts]}]
    body = {"model": MODEL, "messages": messages, "horde": {"dry_run": True}}
    return json.dumps(body).encode()


def image_decodes(native: NativeProcess) -> None:
    vision_worker_online(native)
    for at_once, images in IMAGE_RUNS:
        body = images_body(images)
        reset_peak(native.pid)
        answers: Counter[str] = Counter()

        def submit(body: bytes = body, answers: Counter[str] = answers) -> None:
            answer = httpx.post(
                f"{native.url}/api/v2/generate/chat/async",
                headers={"apikey": "0000000000", "content-type": "application/json"},
                content=body,
                timeout=300,
            )
            answers[f"{answer.status_code} {answer.json().get('rc', '')}".strip()] += 1

        started = time.monotonic()
        senders = [threading.Thread(target=submit) for _ in range(at_once)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
        took = time.monotonic() - started
        peak = memory(native.pid, "VmHWM")
        label = f"{at_once}x{images}img"
        print(
            f"images: {at_once} requests of {images} images ({len(body) / 1e6:.2f} MB each)"
            f" answered {dict(answers)} in {took:.1f} s",
            flush=True,
        )
        print(f"figure: native_image_hwm_mb[{label}] = {peak} MB", flush=True)


def main() -> None:
    with native_process() as native:
        slow_bodies(native)
        header_flood(native)
        image_decodes(native)


if __name__ == "__main__":
    main()
