"""The machine's own pace when a bench starts, printed as figures beside the bench's.

The 2-core VM these benches run on moves in speed between sittings more than most changes
they measure (docs/performance.md); these two figures say how fast it was at the time, so
runs from different sittings can at least be told apart:

- ``host_python_ms``: a fixed piece of pure Python (a chat status's JSON encoded and decoded
  ``ROUNDS`` times), the median of ``REPEATS``: what the services' own Python costs.
- ``host_wakeup_us``: a byte's round trip to a child process and back over pipes, the median
  of ``PINGS``: each hop between our processes (client, front, native API, worker, Postgres,
  Redis) is a sleep and a wake like these two.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

ROUNDS = 2000
REPEATS = 7
PINGS = 2000
STATUS = {
    "finished": 1, "processing": 0, "restarted": 0, "waiting": 0, "done": True,
    "faulted": False, "wait_time": 0, "queue_position": 0, "kudos": 12.0, "is_possible": True,
    "generations": [{
        "content": "Hello! How can I help you today?", "finish_reason": "stop",
        "worker_id": "5b8d6c1e-2f0a-4d8e-9a51-0c7e3b1f9d42", "worker_name": "bench-worker",
        "model": "bench-front-7B", "state": "ok", "kudos": 12.0,
        "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21},
    }],
}  # fmt: skip
ECHO = "import os\nwhile os.read(0, 1):\n    os.write(1, b'.')\n"
"""The child: echoes each byte until its stdin closes."""


def python_ms() -> float:
    """The median time of ``ROUNDS`` JSON round trips of ``STATUS``, in ms."""
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        for _ in range(ROUNDS):
            json.loads(json.dumps(STATUS))
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def wakeup_us() -> float:
    """The median round trip of one byte to a child process and back, in microseconds."""
    child = subprocess.Popen(
        [sys.executable, "-c", ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
    )
    assert child.stdin is not None
    assert child.stdout is not None
    out, back = child.stdin.fileno(), child.stdout.fileno()
    times = []
    try:
        for _ in range(PINGS):
            started = time.perf_counter()
            os.write(out, b".")
            os.read(back, 1)
            times.append(time.perf_counter() - started)
    finally:
        child.stdin.close()
        child.wait(timeout=10)
        child.stdout.close()
    return statistics.median(times) * 1e6


def print_host_figures() -> None:
    """``host_python_ms`` and ``host_wakeup_us``, as figure lines."""
    print(f"figure: host_python_ms = {python_ms():.2f} ms")
    print(f"figure: host_wakeup_us = {wakeup_us():.1f} us", flush=True)


if __name__ == "__main__":
    print_host_figures()
