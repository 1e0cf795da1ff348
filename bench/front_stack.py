"""What bench/front.py runs against: the real front as its own process, the bench's users on
the native API, and a worker that answers over the native HTTP pop/submit routes.

``start_front`` runs ``python -m runtime.front`` (FrontConfig from the environment, served by
FrontService) on a free loopback port, with the bench's caps and budgets. ``BenchWorker`` pops
only when the bench asked for that many answers (``want(n)``), popping back to back until it
finds a job, so its polling never sleeps through a request; ``hold`` may delay a popped job's
submit, and ``submit_started`` records when each submit was sent (time.perf_counter, in
order; a pop names the generation, not the request), ``submit_returned`` when its response
arrived. ``hold_open_waits`` is the entry of the
child process that holds thousands of requests open: their sockets stay out of the bench
process, where the native API's waitress select()s and cannot take descriptors above 1024.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy.orm import Session, sessionmaker

from generated.chat.tables import FEATURES, GUARANTEES
from runtime.native.accounts.keys import create_user
from runtime.stores.database import transaction
from tests.integration.chat_flow import chat_pop_body

FIND_JOB_TIMEOUT = 60.0
"""How long the worker pops for a job it was told to expect before recording an error."""
REPLY = {"content": "Hello.", "finish_reason": "stop"}


def bench_users(sessions: sessionmaker[Session]) -> tuple[str, str]:
    """API keys of the requester (kudos and concurrency raised for thousands of requests)
    and of the worker's owner (``sessions``: the native API's database)."""
    with transaction(sessions) as session:
        requester = create_user(session, "bench-requester", kudos=10**9, concurrency=10**6)[1]
        owner = create_user(session, "bench-worker-owner")[1]
    return requester, owner


def start_front(
    redis_url: str, native_url: str, *, cap: int, poll: float
) -> tuple[subprocess.Popen[str], str]:
    """The front in its own process; its URL (without /v1) once it serves."""
    env = {
        **os.environ,
        "HORDE_REDIS_URL": redis_url,
        "HORDE_FRONT_NATIVE_ROOTS": native_url,
        "HORDE_FRONT_HOST": "127.0.0.1",
        "HORDE_FRONT_PORT": "0",
        "HORDE_FRONT_PER_SOURCE": str(cap),
        "HORDE_FRONT_GLOBAL": str(cap),
        "HORDE_FRONT_POLL": str(poll),
        "HORDE_FRONT_GRACE": "600",
        "HORDE_FRONT_DEADLINE": "900",
    }
    command = [sys.executable, "-m", "runtime.front"]
    process = subprocess.Popen(
        command, cwd=Path(__file__).resolve().parents[1], env=env, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("chat front: "):
        process.kill()
        process.wait(timeout=10)
        raise RuntimeError(f"the front did not start: {line!r}")
    return process, line.removeprefix("chat front: ").removesuffix("/v1")


def stop_front(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def chat_declaration(name: str, model: str) -> dict[str, Any]:
    """A pop body of a chat-only worker ``name`` serving ``model`` with every feature and
    guarantee."""
    everything = [*FEATURES, *GUARANTEES]
    return chat_pop_body(name, model=model, features=everything, prompt_jobs=False)


class BenchWorker:
    """One worker thread answering chat jobs for ``model`` with a fixed reply."""

    def __init__(
        self,
        native_url: str,
        api_key: str,
        model: str,
        hold: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        headers = {"apikey": api_key}
        self.client = httpx.Client(base_url=f"{native_url}/api/v2", headers=headers, timeout=30)
        self.declaration = chat_declaration("bench-chat-worker", model)
        self.hold = hold
        self.submit_started: list[float] = []
        self.submit_returned: list[float] = []
        """When each accepted submit's response arrived (same order as submit_started)."""
        self.answered = threading.Semaphore(0)
        """Released once per submit the native API accepted (after its response)."""
        self.errors: list[BaseException] = []
        self._wanted = threading.Semaphore(0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-worker", daemon=True)

    def want(self, answers: int = 1) -> None:
        """Answer ``answers`` more jobs (each as soon as a pop finds it)."""
        self._wanted.release(answers)

    def _pop(self) -> dict[str, Any]:
        response = self.client.post("/generate/text/pop", json=self.declaration)
        return dict(response.raise_for_status().json())

    def _answer_one(self) -> None:
        deadline = time.monotonic() + FIND_JOB_TIMEOUT
        job = self._pop()
        while not job.get("id"):
            if self._stop.is_set() or time.monotonic() > deadline:
                raise TimeoutError("no job found for a wanted answer")
            job = self._pop()
        if self.hold is not None:
            self.hold(job)
        self.submit_started.append(time.perf_counter())
        submitted = self.client.post("/generate/text/submit", json={"id": job["id"], **REPLY})
        submitted.raise_for_status()
        self.submit_returned.append(time.perf_counter())
        self.answered.release()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._wanted.acquire(timeout=0.1):
                continue
            try:
                self._answer_one()
            except Exception as exc:  # reported by the bench; the loop goes on
                self.errors.append(exc)

    def __enter__(self) -> BenchWorker:
        self._pop()  # online before the first request: admission counts online workers
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=FIND_JOB_TIMEOUT + 30)
        self.client.close()


def hold_open_waits(
    url: str, key: str, body: dict[str, Any], count: int, timeout: float, results: Queue[Any]
) -> None:
    """Child process: ``count`` concurrent POSTs to ``url``, each held until answered; puts
    their status codes (or the error) on ``results``."""
    try:
        results.put(asyncio.run(_post_all(url, key, body, count, timeout)))
    except Exception as exc:
        results.put(repr(exc))


async def _post_all(
    url: str, key: str, body: dict[str, Any], count: int, timeout: float
) -> list[int]:
    limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=0)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=timeout, limits=limits, headers=headers) as client:
        responses = await asyncio.gather(*(client.post(url, json=body) for _ in range(count)))
    return [r.status_code for r in responses]
