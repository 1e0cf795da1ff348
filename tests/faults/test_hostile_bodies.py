"""Hostile bodies sent to a ``horde-chat front`` while 50 other clients use it.

The front runs as an operator runs it (shipped settings) on the suite's Redis and native
API. Fifty clients each send a small request again and again on a keep-alive connection (a
body the front reads, parses and refuses 400 itself: its event loop's work, no native call),
and two chat requests wait for a paused worker, while these bodies are sent one after the
other: 30 MB with its Content-Length, 30 MB chunked (read up to the body cap), 10,000 nested
arrays, and 1 MiB of ``[{},{},...]`` (the text allowance: the costliest parse a body can
ask for, taken off the event loop to a parser process).

Asserted: each hostile body gets its 413 or 400 in OpenAI's envelope; every other client's
every request is answered (400), the waiting requests 200 once the worker resumes; the
front's peak RSS grows by less than RSS_BOUND and each parser process peaks under
PARSER_RSS_BOUND; the parser processes did the parsing (their CPU time grew); once the front
is SIGKILLed its parser processes exit. The latency the 50 clients saw is printed
(``figure: hostile_others_extra_ms[<body>]``: their slowest request while that body was sent
and answered, over their median before), never asserted. Each hostile body is sent by a
process of its own: sent from the test's event loop, its 30 MB would delay the 50 clients.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from generated.errors import InvalidJSON
from runtime.front.admission import Parser, checked_and_encoded
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from tests.conftest import MadeUser
from tests.faults.support import MESSAGES, MODEL
from tests.faults.test_front_death import start_front
from tests.support.chat_worker import ChatTestWorker
from tests.support.waiting import until

pytestmark = [pytest.mark.faults, pytest.mark.integration]

CLIENTS = 50
PAUSE = 0.2
"""Seconds each of the 50 clients waits between its requests."""
BASELINE = 1.5
"""Seconds of the 50 clients' requests before the first hostile body."""
SMALL = b'{"model":"hostile-faults","messages":"not a list"}'
MB = 1024 * 1024
RSS_BOUND = 64 * MB
"""Peak RSS growth of the front process while the hostile bodies are answered (it reads up
to 25 MiB of the chunked one)."""
PARSER_RSS_BOUND = 256 * MB
"""Peak RSS of each parser process (the 1 MiB array of objects parses to ~350,000 dicts)."""
WAITING = 2
Answers = list[tuple[float, float, bytes]]
"""One client's requests: (sent, answered: time.monotonic, status)."""


def deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def objects(size: int) -> bytes:
    return b"[" + b"{}," * (size // 3 - 1) + b"{}]"


HOSTILE: list[tuple[str, bytes, bool, int, str]] = [
    ("30 MB", b" " * (30 * MB), False, 413, "PayloadTooLarge"),
    ("30 MB chunked", b" " * (30 * MB), True, 413, "PayloadTooLarge"),
    ("10,000 deep", deep(10_000), False, 400, "InvalidJSON"),
    ("1 MiB of {}", objects(MB - 64), False, 400, "InvalidChatParameter"),  # not an object
]
"""(name, body, sent chunked, status, code)."""
SENDER = r"""
import json, sys, time, httpx
url, path, chunked = sys.argv[1], sys.argv[2], sys.argv[3] == "chunked"
body = open(path, "rb").read()
def pieces():
    for at in range(0, len(body), 256 * 1024):
        yield body[at : at + 256 * 1024]
started = time.monotonic()
try:
    response = httpx.post(
        url, content=pieces() if chunked else body, timeout=120,
        headers={"content-type": "application/json"},
    )
    answer = [response.status_code, response.json()]
except httpx.TransportError as cut:
    answer = [0, repr(cut)]
print(json.dumps([started, time.monotonic(), *answer]))
"""
"""Sends one hostile body from a process of its own, so that sending 30 MB does not hold
the 50 clients' event loop (they run in the test's process)."""


def children_of() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return children


def descendants(pid: int) -> list[int]:
    """Every process ``pid`` started, and they started (the forkserver and the parsers)."""
    children, found, todo = children_of(), [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def status_field(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {name} for {pid}")


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def poll(url: str, stop: asyncio.Event) -> Answers:
    """One client: the small request, on one keep-alive connection, until ``stop``."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(SMALL)}\r\n\r\n"
    ).encode() + SMALL
    answered: Answers = []
    await asyncio.sleep(random.uniform(0, PAUSE))
    try:
        while not stop.is_set():
            start = time.monotonic()
            writer.write(request)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            answered.append((start, time.monotonic(), head.split(b" ", 2)[1]))
            await asyncio.sleep(PAUSE)
    finally:
        writer.close()
    return answered


async def send(url: str, file: Path, chunked: bool) -> list[Any]:
    """[started, ended (time.monotonic), status, the JSON answer] of the body in ``file``."""
    mode = "chunked" if chunked else "length"
    sender = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SENDER, url, str(file), mode, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await sender.communicate()
    answer: list[Any] = json.loads(out)
    return answer


async def hostile_run(url: str, files: list[Path]) -> tuple[list[Answers], list[list[Any]]]:
    stop = asyncio.Event()
    clients = [asyncio.create_task(poll(url, stop)) for _ in range(CLIENTS)]
    await asyncio.sleep(BASELINE)
    answers = []
    for file, (_, _, chunked, _, _) in zip(files, HOSTILE, strict=True):
        answers.append(await send(f"{url}/v1/chat/completions", file, chunked))
        await asyncio.sleep(PAUSE * 2)
    stop.set()
    return [await client for client in clients], answers


def test_hostile_bodies_are_refused_in_bounds_while_others_are_served(
    tmp_path: Path,
    fault_stores: EmbeddedStores,
    fault_native: NativeService,
    users: tuple[MadeUser, MadeUser],
) -> None:
    requester, owner = users
    files = [tmp_path / f"hostile-{i}" for i in range(len(HOSTILE))]
    for file, (_, body, *_) in zip(files, HOSTILE, strict=True):
        file.write_bytes(body)
    front = start_front(tmp_path, fault_stores, fault_native)
    pid = front.process.pid
    parsers = until(lambda: len(descendants(pid)) >= 3 and descendants(pid), "parsers up")
    outcomes: list[int] = []
    with ChatTestWorker(f"{fault_native.url}/api/v2", owner.api_key, model=MODEL) as worker:
        worker.pause()

        def wait() -> None:
            got = httpx.post(
                f"{front.url}/v1/chat/completions",
                headers={"Authorization": f"Bearer {requester.api_key}"},
                json={"model": MODEL, "messages": MESSAGES},
                timeout=120,
            )
            outcomes.append(got.status_code)

        waiting = [threading.Thread(target=wait) for _ in range(WAITING)]
        for thread in waiting:
            thread.start()
            threading.Event().wait(0.6)  # the native submit limit: 2 a second per client
        ticks = {p: cpu_ticks(p) for p in parsers}
        before = status_field(pid, "VmRSS")
        polled, answers = asyncio.run(hostile_run(front.url, files))

        growth = status_field(pid, "VmHWM") - before
        parser_peaks = {p: status_field(p, "VmHWM") for p in parsers if alive(p)}
        spent = {p: cpu_ticks(p) - ticks[p] for p in parsers if alive(p)}
        worker.resume()
        for thread in waiting:
            thread.join(60)
    assert outcomes == [200] * WAITING

    for (name, _, _, status, code), (_, _, got, answer) in zip(HOSTILE, answers, strict=True):
        assert got == status, (name, answer)
        assert answer["error"]["code"] == code, (name, answer)
        assert answer["error"]["type"] == "invalid_request_error"
    for client in polled:
        assert client, "a client had no request answered"
        assert {status for _, _, status in client} == {b"400"}
    assert growth < RSS_BOUND, growth / MB
    assert parser_peaks
    assert max(parser_peaks.values()) < PARSER_RSS_BOUND, parser_peaks
    assert sum(spent.values()) > 0, spent  # the large parses ran in the parser processes

    requests = [(start, end) for client in polled for start, end, _ in client]
    median = statistics.median(end - start for start, end in requests if end < answers[0][0])
    print(f"others: median {median * 1000:.1f} ms before; load {os.getloadavg()[0]:.1f}")
    for (name, *_), (sent, answered, *_) in zip(HOSTILE, answers, strict=True):
        during = [end - start for start, end in requests if end > sent and start < answered]
        extra = (max(during, default=median) - median) * 1000
        print(f"figure: hostile_others_extra_ms[{name}] = {extra:.1f} ms ({len(during)} requests)")
    print(f"figure: hostile_front_rss_growth_mb = {growth / MB:.1f} MB")
    print(f"figure: hostile_parser_peak_rss_mb = {max(parser_peaks.values()) / MB:.1f} MB")

    front.process.send_signal(signal.SIGKILL)
    front.process.wait(10)
    until(lambda: not any(alive(p) for p in parsers), "the parser processes exited", 15)
    for pipe in (front.process.stdout, front.process.stderr):
        if pipe is not None:
            pipe.close()


def test_a_parser_process_killed_costs_one_answer_at_most() -> None:
    """A parser process SIGKILLed (the kernel's OOM killer) is replaced by the next body: it
    finds the process dead and is parsed by a new pool (the front needs no restart), not by
    the survivor until the pool's own thread notices, which under a steady flow of bodies it
    never does (a fresh-clone run parsed three bodies on the survivor, the dead pid still
    listed). A body the dead process held answers 503 FrontAtCapacity: one answer at most."""
    parser = Parser()
    parser.open()
    try:
        body = deep(10_000)
        with pytest.raises(InvalidJSON):
            asyncio.run(parser.run(body, checked_and_encoded))
        victim = parser.pids()[0]
        os.kill(victim, signal.SIGKILL)
        until(lambda: not Path(f"/proc/{victim}").exists(), "the killed parser reaped")
        with pytest.raises(InvalidJSON):
            asyncio.run(parser.run(body, checked_and_encoded))
        assert victim not in parser.pids()
    finally:
        parser.close()
