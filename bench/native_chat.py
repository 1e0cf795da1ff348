"""Chat pop+submit cycles per second with 10,000 chat requests queued, beside text ones.

Half the queue is chat requests (stored requirements, messages deferred), half text.
Printed, never pass/fail: ``chat_pop_submit_cycles_per_s``, 8 workers whose declaration
covers the chat requests (a process of their own, bench/support/cycle_client.py, for
SECONDS after a warm-up); ``chat_pop_uncovered_p50_ms``, a pop by a chat-only worker whose
declaration covers none of them (the eligibility filter scans the queue without loading
messages); ``chat_status_read_p50_ms``, a chat status read (availability and wait-time
estimate over the queue), and ``chat_status_read_cpu_ms``, this process's CPU a read (the
server and the httpx client). Run: ``.venv/bin/python bench/native_chat.py``;
docs/performance.md has the figures measured so far.
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
