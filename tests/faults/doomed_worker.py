"""A chat worker process for a fault test to SIGKILL: it pops chat jobs of one model over
HTTP until it gets one, posts the given progress texts (seq 0, 1, ...), prints
``{"id": <job id>}`` on stdout, then sleeps until it is killed.

    python -m tests.faults.doomed_worker NATIVE_URL API_KEY MODEL [POST ...]

``DoomedWorker`` starts it and waits for that line: ``job_id``; ``kill()`` sends SIGKILL.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Self

import httpx

from tests.support.chat_worker import ChatTestWorker
from tests.support.waiting import until
from tests.support.workers import listed_workers, listing_pace

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0


def main(argv: list[str]) -> None:
    native_url, api_key, model, *posts = argv
    worker = ChatTestWorker(native_url, api_key, model=model, name="doomed-worker")
    while not (job := worker.pop_once()).get("id"):
        time.sleep(0.05)
    for seq, text in enumerate(posts):
        response = worker.client.post(
            "/generate/text/progress", json={"id": job["id"], "seq": seq, "delta": text}
        )
        response.raise_for_status()
    print(json.dumps({"id": job["id"]}), flush=True)
    threading.Event().wait()  # until SIGKILL


class DoomedWorker:
    """The process above, started; ``job_id`` once it popped (and posted)."""

    def __init__(self, native_url: str, api_key: str, model: str, *posts: str) -> None:
        self.args = [native_url, api_key, model, *posts]
        self.process: subprocess.Popen[str] | None = None
        self.job_id = ""

    def __enter__(self) -> Self:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.doomed_worker", *self.args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        return self

    def online(self, native_url: str) -> None:
        """Wait until the worker popped once (the native API admits on it)."""
        with httpx.Client(base_url=native_url, timeout=10) as client:
            until(
                lambda: any(w["name"] == "doomed-worker" for w in listed_workers(client)),
                "the doomed worker's first pop",
                START_TIMEOUT,
                poll=listing_pace(),
            )

    def popped(self) -> str:
        """The job id it printed once it popped and posted."""
        assert self.process is not None
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise AssertionError(f"the doomed worker ended: {self.process.wait()}")
        self.job_id = str(json.loads(line)["id"])
        return self.job_id

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()


if __name__ == "__main__":
    main(sys.argv[1:])
