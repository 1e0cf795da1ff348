"""A new chat request reaching an idle worker: the native API's long-poll pop (issue 14).

Prints figures, never passes or fails on time:
``dispatch_p50_ms`` / ``dispatch_p99_ms``: an idle worker long-polls (its pop asks for
``wait``, the spec's maximum, as the project's worker does); a requester submits a chat
request; measured from just before the requester sends ``POST /generate/chat/async`` to
the moment the worker's waiting pop has answered with that job in its hands. So it covers
the submit's own work up to its commit and the wake (Redis publish, the native process's
subscription, the pop run again), not the requester's 202
(``dispatch_submit_answer_p50_ms``: the submit's own answer, for comparison; the job may
reach the worker before it). One request at a time: the next
is sent once the worker submitted the reply and popped again (its pop is waiting).
``dispatch_poll_p50_ms`` (fewer samples): the same with ``wait`` 0 and a pop every second,
as upstream's workers and this project's worker before the long poll.

The worker and the requester are two threads of one client process of their own
(``python bench/dispatch.py --client``: stdlib HTTP, one keep-alive connection each), so
their clocks agree and the client never shares the server's interpreter. The server is
``NativeService`` (uvicorn, one process) in this process on embedded stores, rate limits as
shipped times HORDE_RATE_LIMIT_SCALE=100 (the requester sends more than 2 chat requests a
second). ``dispatch_server_cpu_ms_per_request``: the server process's CPU over the long-poll
run per request (the chat submit with its first status read, the woken pop, the worker's
reply and its next pop), a figure the machine's load moves less than the latencies.

Where the time goes (2026-12-03, 2 cores shared with other work, load 4-5; server-side
stamps of 100-150 requests, p50 from the requester's send):

- send -> the submit's Flask view: 2-3 ms (uvicorn, a thread of the clients' lane);
- its checks (passkey, headers, the chat validator, the body's schema): ~1 ms;
- its transaction up to the commit: 6.5-12 ms (~5 ms of CPU: the key FOR UPDATE, the online
  workers, the concurrency count, the row, the horde tax, the commit);
- commit -> publish -> this process's subscription -> the woken pop's view: ~1 ms;
- the woken pop's view to its answer: 10-15 ms, the submit's first status read running
  beside it (3-4 ms of CPU, more with a deep queue: bench/native_chat.py) under one GIL.

So half the dispatch is the submit's own work before its commit and half the pop's; the
wake itself is ~1 ms. Cut this session (issue 14): the submit's key check, a transaction
of its own before the one that checks the key anyway; the query for a model an online
worker serves; the concurrency count's second statement; the status read's SQL expressions
built per worker (now per worker setup, kept). Python function calls per chat submit
(cProfile, same run): 17,162 -> 10,452 (the first status read 8,773 -> 3,839). The figures
at load 5-18 were 31-100 ms p50 before and after alike: on this machine the load, not the
code, decides them; dispatch_server_cpu_ms_per_request 63-66 -> 41-61 ms.

Then (helper C, issue 14; cProfile and thread CPU in process through Flask's test client,
one worker, this bench's chat; the benches A B A B against the tree without these commits):
the submit answers with its new request's status as of its commit, computed from what it
had in hand (the row, no job yet; the online workers it was admitted against), its queue
position one statement after the commit in autocommit, compiled once per pool (was: a
transaction of its own reloading the row, its jobs and the workers, 5 statements, the
wait-time filter built and walked per read); the submit's statements (the key's user FOR
UPDATE, the online workers, the concurrency count, the kudos move) are built once with
bound parameters (building them cost ~0.2-0.8 ms of CPU each at load 6); a worker's
declaration is parsed once and kept (53 -> 9 us a pop). A chat submit with its first status
12.2-12.7 -> 4.7-5.7 ms of CPU, 10,984 -> 6,008 Python calls (5,818 once the concurrency
count rides on the online workers' read); 7 database round trips (BEGIN, the key's user
FOR UPDATE, the online workers with the concurrency count, the row's INSERT, the horde
tax, COMMIT, the position) instead of 13. This bench at load 3-7:
dispatch_server_cpu_ms_per_request 34.7/36.4 -> 31.6/31.3 ms; dispatch_p50_ms 27.2/28.4 ->
28.7/20.5 ms and dispatch_submit_answer_p50_ms 27.9/30.6 -> 23.0/16.6 ms (p99 42-181 ms
either way: the load decides it); with the concurrency count on the online workers' read,
at load 1.5-2.8: 38.5/37.8 -> 30.4/28.6 ms of server CPU a request, dispatch_p50_ms
26.4/27.3 -> 24.1/24.1 ms, dispatch_submit_answer_p50_ms 26.4/28.2 -> 19.7/19.4 ms.
What is left of the submit is mostly waiting on those round trips; of the server's ~30 ms
per request the largest shares are now the worker's reply (the chat job's submit and
payment, ~7-9 ms of CPU in process, 9,185 calls), the HTTP shell and the woken pop; the
body's JSON Schema check is ~0.2 ms (its messages' oneOf).

Then (helper hP, issue 14: the pop's side, ec355f1 -> this). Traced (server stamps on the
client's clock, perf_counter: the submit's view, its commit by an after_commit hook, the wake
call, the hub's wake, the woken pop's lane thread, its statement, its answer sent), 150
samples at load ~2, p50, before the cuts below: send -> the submit's view 1.1 ms; -> its
commit 6.4; -> the wake call 0.14; -> the publish back 0.28, the hub woken 0.5 after it
(Redis's delivery); -> the pop on its lane thread 0.28; its checks and declaration 0.31; its
statement 1.9 ms of wall for 0.53 of CPU (the submit's first status read and its answer run
beside it under one GIL); the chat job's payload 0.19; the answer sent 0.2, in the client's
hands 0.33: ~12 ms, ~7.5 of them the submit's own work up to its commit. The woken chat pop
was 2.75 ms of its thread's CPU p50 (1.2 after) and 6 round trips.

Cut: the chat pop's one statement returns what the payload reads of its request (its row was
loaded, then chat_request and messages lazily, in a transaction: 6 round trips -> 1;
statements per request of this bench, pg_stat_statements, 28.25 -> 21.20); the pop's
statement converted to $n placeholders once (``runtime/stores/raw_sql.py``: psycopg split the
~5.4 KiB chat pop on every execute, 74 us); a Core connection, not an ORM Session, under a
known worker's pop (~60-75 us a pop); the submit wakes its own process's waiting pops
directly before publishing (the hub wakes ~0.05 ms after the wake call, not ~0.85; the woken
pop then shares the GIL with the publish and the status read, so the dispatch gains less).
A B A B against ec355f1 at load 6.6 -> 2.0: dispatch_p50_ms 14.5/14.1 -> 11.1/8.0,
dispatch_p99_ms 38.2/28.7 -> 16.7/17.7, dispatch_submit_answer_p50_ms 11.9/11.3 -> 11.3/8.5,
dispatch_server_cpu_ms_per_request 14.1/13.6 -> 13.1/12.1 ms.

Measured and not kept: the server at sys.setswitchinterval(0.001) (the woken pop waits for the
GIL beside the submit's thread): traced TOTAL p50 14.7/16.9 ms (5 ms, the default) vs
20.4/17.4 (1 ms), the pop's statement 3.25/3.07 vs 3.73/3.08 ms of wall, at load 7-8: no
gain. Not done, measured too small: a woken run re-checking its pop's body (headers, parse,
schema: 12 us of CPU) and building its transient ORM Worker (~10 us).

Then (2026-12-04, the chat submit's transaction, issue 14): its reads before any write were
BEGIN, the key's user FOR UPDATE, the operation key, the online workers with the concurrency
count (four round trips), now two statements in one pipeline
(``runtime/native/requests/admission.py``); its writes were the row (the ORM's flush
and its unit of work), the horde tax and the operation key's claim (three), now one
statement (``runtime/native/requests/enqueue.py``). Before the commit: 9 round trips ->
3 (the reads, the writes, COMMIT). In process (one client, the route through httpx, 600
submits with an operation key): the route's wall p50 17.0 -> 15.4 (the reads) -> 10.2 ms,
the process's CPU per submit 14.1 -> 12.5 -> 8.2 ms; py-spy's samples in the view 3,151 ->
1,743 for the same 600. Server stamps (this bench, in process, p50): the view's entry to
its commit 5.6 ms, the commit to the woken pop's last run 0.55, that run 3.05, the commit
to the submit's answer 2.7 (its first status read and the wake's publish). On the server,
auto_explain's p50: the reads 0.09 + 0.25 ms, the writes 0.47, COMMIT 0.68 (the WAL's
fdatasync is ~0.32 ms on this disk), the pop's one statement 0.5-0.9. A B A B against
d13e805 (idle, 17:23-17:27): dispatch_p50_ms 15.3/16.5 -> 13.8/15.7,
dispatch_submit_answer_p50_ms 16.0/16.6 -> 14.5/15.7, dispatch_server_cpu_ms_per_request
19.5/20.7 -> 17.9/20.5 ms. Measured and not kept: the first status read before the wake, so
the woken pop does not share the GIL with it (dispatch_p50_ms 14.3/15.2 -> 13.7/15.6).
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
    engine = make_engine(database_url, pool_size=1, max_overflow=0)
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
