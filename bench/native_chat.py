"""Chat pop+submit cycles per second with 10,000 chat requests queued, beside text ones.

Prints figures, never passes or fails on time. Half the queue is chat requests (stored
requirements, messages deferred), half text. Three figures: chat cycles/s for workers whose
declaration covers the chat requests (8 workers in a process of their own,
bench/support/cycle_client.py, for SECONDS after a warm-up); the latency of a pop by a
chat-only worker whose declaration covers none of them (the eligibility filter scans the
queue without loading messages); and a chat status read (availability and wait-time
estimate over the queue).

Where a status read's time goes (10,000 queued, 8 covering workers of one setup; issue 14):
before, ~28 ms of CPU a read (load 7.5), 31,700 Python calls: the wait-time filter (the
queued work one of the eligible workers could take) was built as SQL expressions worker by
worker, ~12 ms for 8 workers, then its count. Now the workers of one setup are one branch
(the worker-list rule tried for any of their ids) and a setup's branch is built once and
kept: 6.9 ms of CPU, 5,300 calls; chat_status_read_p50_ms 28-52 -> 23-27 ms at load 4-8.
What is left is the count itself: a scan of the ~10,000 rows ahead evaluating the filter
(jsonb models, features and limits) on each chat row, 6-16 ms of SQL on this machine as its
load goes. It grows with the queue; an index serves the position count, not the filtered
token sum, whose terms are the workers'.

Then (helper C, issue 14): a status read is 4 statements outside any transaction (the
request with its reader's user id and end-user fields in one, its prompt unread; its jobs;
the online workers; the position), not 6 and a BEGIN/COMMIT, each statement built once
with bound parameters, the position's SQL compiled once per pool and run on the driver's
cursor. ``chat_status_read_cpu_ms`` (this process's CPU per read: the server and the
httpx client; A B A B at load 5-8) 10.5/10.0 -> 6.7/7.4 ms; chat_status_read_p50_ms
32.8/32.7 -> 17.0/28.8 ms. In process (Flask's test client, one worker, a short queue)
6.4-6.7 -> 2.4-2.9 ms of CPU, 5,868 -> 3,712 Python calls.

Then the same statements run in one read-only REPEATABLE READ transaction again (a BEGIN
and a COMMIT more): statement by statement, a worker's fault committed between the
request's read and its jobs' was read half, a request back in the queue read as done
(tests/integration/test_native_status_snapshot.py). A B A B (before, after):
chat_status_read_p50_ms 21.6/21.6 -> 20.0/25.2 ms, chat_status_read_cpu_ms 7.5/8.2 ->
7.0/9.4 ms: no change beyond the noise of the position count.
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.native_stack import analyze, native_service
from bench.support.cycle_client import measure
from generated.chat.names import (
    DECL_CHAT_FEATURES,
    DECL_CHAT_JOBS,
    DECL_MODEL_ID,
    DECL_PROMPT_JOBS,
    GUARANTEE_PROMPT_OVERFLOW_REFUSED,
    LIMIT_MAX_CONTEXT_LENGTH,
    LIMIT_MAX_LENGTH,
)
from runtime.native.accounts.keys import create_user
from runtime.native.db.tables import WaitingPrompt
from runtime.native.queue.sweep import utcnow
from runtime.native.server import NativeService
from runtime.stores.database import transaction

QUEUED = 10_000
WORKERS = 8
SECONDS = 8.0
WARMUP = 5
SAMPLES = 50
MODEL = "bench-chat-7B"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x" * 2000}]


def main() -> None:
    with native_service() as service:
        run(service)


def _queue(service: NativeService) -> tuple[list[str], str]:
    now = utcnow()
    with transaction(service.context.sessions) as session:
        requester, requester_key = create_user(
            session, "bench-requester", kudos=10**6, concurrency=10**6
        )
        keys = [create_user(session, f"bench-worker-{i}")[1] for i in range(WORKERS + 1)]
        for i in range(QUEUED):
            chat = i % 2 == 0
            session.add(
                WaitingPrompt(
                    id=uuid.uuid4(), user_id=requester.id, is_chat=chat,
                    prompt="bench", params={} if chat else {"max_length": 80},
                    messages=MESSAGES if chat else None,
                    chat_request={"model": MODEL} if chat else None,
                    required_features=[GUARANTEE_PROMPT_OVERFLOW_REFUSED] if chat else [],
                    required_limits={LIMIT_MAX_LENGTH: 80, LIMIT_MAX_CONTEXT_LENGTH: 750},
                    n=1, jobs=1, max_length=80, max_context_length=2048, models=[MODEL],
                    workers=[], extra_priority=10**7 + i % 100, kudos_estimate=1, created=now,
                    expiry=now + timedelta(hours=1),
                )
            )  # fmt: skip
    return keys, requester_key


def _declaration(name: str, features: list[str]) -> dict[str, object]:
    return {
        "name": name,
        "models": [MODEL],
        DECL_CHAT_JOBS: True,
        DECL_MODEL_ID: MODEL,
        DECL_CHAT_FEATURES: features,
        DECL_PROMPT_JOBS: False,
    }


def run(service: NativeService) -> None:
    keys, requester_key = _queue(service)
    analyze(service)
    base = f"{service.url}/api/v2"

    covering = _declaration("unused", [GUARANTEE_PROMPT_OVERFLOW_REFUSED])
    del covering["name"]
    rate = measure(
        [base],
        keys[:WORKERS],
        seconds=SECONDS,
        warmup=WARMUP,
        kind="chat",
        declaration=covering,
    )

    with httpx.Client(base_url=base, headers={"apikey": keys[WORKERS]}) as client:
        empty = _declaration("uncovering", [])
        pops = []
        for _ in range(SAMPLES):
            t0 = time.perf_counter()
            assert client.post("/generate/text/pop", json=empty).json()["id"] is None
            pops.append(time.perf_counter() - t0)
        submitted = client.post(
            "/generate/chat/async",
            headers={"apikey": requester_key},
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        )
        request_id = submitted.raise_for_status().json()["id"]
        reads = []
        cpu = time.process_time()
        for _ in range(SAMPLES):
            t0 = time.perf_counter()
            client.get(f"/generate/chat/status/{request_id}").raise_for_status()
            reads.append(time.perf_counter() - t0)
        cpu = time.process_time() - cpu
    print(f"queued={QUEUED} (half chat) workers={WORKERS} samples={SAMPLES}")
    print(f"figure: chat_pop_submit_cycles_per_s = {rate:.1f} cycles/s")
    print(f"figure: chat_pop_uncovered_p50_ms = {statistics.median(pops) * 1000:.1f} ms")
    print(f"figure: chat_status_read_p50_ms = {statistics.median(reads) * 1000:.1f} ms")
    print(f"figure: chat_status_read_cpu_ms = {cpu * 1000 / SAMPLES:.1f} ms")


if __name__ == "__main__":
    main()
