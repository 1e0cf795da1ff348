"""A new chat request reaching an idle worker through the native API's long-poll pop.

An idle worker long-polls (``wait`` at the spec's maximum, as the project's worker does)
while a requester submits one chat request at a time, each timed from just before its
``POST /generate/chat/async`` to the worker's waiting pop answering with that job: the
submit's work up to its commit and the wake (Redis publish, the subscription, the pop run
again). Both are threads of one client process of their own (``--client``, stdlib HTTP), so
their clocks agree; the server is ``NativeService`` in this process on embedded stores, rate
limits as shipped times HORDE_RATE_LIMIT_SCALE=100 (it sends more than 2 chat requests a
second). Printed, never pass/fail: ``dispatch_p50_ms``, ``dispatch_p99_ms``,
``dispatch_max_ms``, ``dispatch_submit_answer_p50_ms`` (the submit's own answer),
``dispatch_server_cpu_ms_per_request`` (the server's CPU a request, which the load moves
less) and ``dispatch_poll_p50_ms`` (``wait`` 0 and a pop every second, as upstream's
workers). Run: ``.venv/bin/python bench/dispatch.py``; docs/performance.md has the figures.
"""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.support.figures import percentile
from bench.support.host import print_host_figures
from generated.chat.names import (
    DECL_CHAT_FEATURES,
    DECL_CHAT_JOBS,
    DECL_CHAT_LIMITS,
    DECL_MODEL_ID,
    GUARANTEE_PROMPT_OVERFLOW_REFUSED,
)
from generated.signals import POP_MAX_WAIT_SECONDS
from runtime.config import Settings
from runtime.native.accounts.keys import create_user
from runtime.native.db.migrate import upgrade
from runtime.native.server import NativeService
from runtime.stores.database import make_engine, make_sessionmaker, transaction
from runtime.stores.embedded import EmbeddedStores

SAMPLES = 200
POLL_SAMPLES = 20
WARMUP = 10
MODEL = "bench-chat-model"
RATE_LIMIT_SCALE = 100
POLL_INTERVAL = 1.0


def main() -> None:
    print_host_figures()  # how fast the machine is at the start (bench/support/host.py)
    data_dir = Path(tempfile.mkdtemp(prefix="horde-bench-dispatch-"))
    stores = EmbeddedStores.start(Settings(data_dir=data_dir))
    try:
        upgrade(stores.database_url)
        requester, worker = _accounts(stores.database_url)
        settings = Settings(data_dir=data_dir, rate_limit_scale=RATE_LIMIT_SCALE)
        service = NativeService.start(
            settings,
            database_url=stores.database_url,
            redis_url=stores.redis_url,
            port=0,
            sweep=False,
        )
        try:
            cpu = time.process_time()
            long_poll = _client(service, requester, worker, POP_MAX_WAIT_SECONDS, SAMPLES)
            cpu = time.process_time() - cpu
            polled = _client(service, requester, worker, 0, POLL_SAMPLES)
        finally:
            service.stop()
    finally:
        stores.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    dispatch = [job for job, _submit in long_poll]
    submit = [submit for _job, submit in long_poll]
    print(f"samples = {len(long_poll)} (long poll, wait {POP_MAX_WAIT_SECONDS} s)")
    print(f"figure: dispatch_p50_ms = {percentile(dispatch, 50):.1f} ms")
    print(f"figure: dispatch_p99_ms = {percentile(dispatch, 99):.1f} ms")
    print(f"figure: dispatch_max_ms = {max(dispatch):.1f} ms")
    print(f"figure: dispatch_submit_answer_p50_ms = {percentile(submit, 50):.1f} ms")
    per_request = cpu * 1000 / (len(long_poll) + WARMUP)
    print(f"figure: dispatch_server_cpu_ms_per_request = {per_request:.1f} ms")
    print(f"samples = {len(polled)} (wait 0, a pop every {POLL_INTERVAL:g} s)")
    print(f"figure: dispatch_poll_p50_ms = {percentile([j for j, _s in polled], 50):.1f} ms")


def _accounts(database_url: str) -> tuple[str, str]:
    engine = make_engine(database_url, pool_size=1)
    try:
        with transaction(make_sessionmaker(engine)) as session:
            _, requester = create_user(session, "bench-requester", kudos=1_000_000)
            _, worker = create_user(session, "bench-worker")
    finally:
        engine.dispose()
    return requester, worker


def _client(
    service: NativeService, requester: str, worker: str, wait: float, samples: int
) -> list[tuple[float, float]]:
    """(dispatch ms, the submit's own answer ms) per sample."""
    spec = {
        "host": service.host,
        "port": service.port,
        "requester": requester,
        "worker": worker,
        "wait": wait,
        "samples": samples,
    }
    done = subprocess.run(
        [sys.executable, __file__, "--client", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"the client failed:\n{done.stderr}")
    return [(float(j), float(s)) for j, s in (line.split() for line in done.stdout.splitlines())]


# ---- the client process


class Http:
    def __init__(self, host: str, port: int, api_key: str) -> None:
        self.conn = http.client.HTTPConnection(host, port, timeout=120)
        self.headers = {"apikey": api_key, "Content-Type": "application/json"}

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        self.conn.request("POST", "/api/v2" + path, json.dumps(body), self.headers)
        response = self.conn.getresponse()
        return response.status, json.loads(response.read())


def run_client(spec: dict[str, Any]) -> None:
    waiting = threading.Event()  # the worker's pop is out (sent, not answered)
    got: dict[str, float] = {}
    served = threading.Event()
    stop = threading.Event()
    wait = float(spec["wait"])

    body = {
        "name": "bench-dispatch-worker",
        "models": [MODEL],
        "max_length": 512,
        "max_context_length": 4096,
        DECL_CHAT_JOBS: True,
        DECL_MODEL_ID: MODEL,
        DECL_CHAT_FEATURES: [GUARANTEE_PROMPT_OVERFLOW_REFUSED],
        DECL_CHAT_LIMITS: {},
        **({"wait": wait} if wait else {}),
    }
    # The worker is online (a chat request names a served model) before the first request.
    Http(spec["host"], spec["port"], spec["worker"]).post("/generate/text/pop", {**body, "wait": 0})

    def work() -> None:
        horde = Http(spec["host"], spec["port"], spec["worker"])
        while not stop.is_set():
            waiting.set()
            _status, job = horde.post("/generate/text/pop", body)
            now = time.perf_counter()
            waiting.clear()
            if job.get("id") is None:
                if not wait:
                    time.sleep(POLL_INTERVAL)
                continue
            got["at"] = now
            reply = {"id": job["id"], "content": "Hello!", "finish_reason": "stop"}
            horde.post("/generate/text/submit", reply)
            served.set()

    threading.Thread(target=work, daemon=True).start()
    requester = Http(spec["host"], spec["port"], spec["requester"])
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello."}]}
    samples: list[float] = []
    for index in range(WARMUP + int(spec["samples"])):
        if wait:
            while not waiting.is_set():  # the worker is idle and its pop waits
                time.sleep(0.001)
            time.sleep(0.02)  # its pop reached the server and waits there
        else:
            time.sleep(POLL_INTERVAL * (index % 7) / 7)  # requests land anywhere in a poll
        served.clear()
        sent = time.perf_counter()
        status, answer = requester.post("/generate/chat/async", chat)
        answered = time.perf_counter()
        if status != 202:
            raise SystemExit(f"chat submit answered {status}: {answer}")
        if not served.wait(60):
            raise SystemExit("the worker never got the request")
        if index >= WARMUP:
            samples.append(((got["at"] - sent) * 1000, (answered - sent) * 1000))
    stop.set()
    print("\n".join(f"{job:.3f} {submit:.3f}" for job, submit in samples))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--client":
        run_client(json.loads(sys.argv[2]))
    else:
        main()
