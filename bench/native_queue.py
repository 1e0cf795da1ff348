"""Pop+submit cycles per second on the embedded servers, 10,000 text requests queued.

Prints a figure, never passes or fails on time. Workers are threads with their own HTTP
clients; each cycle is one pop (FOR UPDATE SKIP LOCKED) and one submit (compare-and-set).
"""

from __future__ import annotations

import sys
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.native_stack import analyze, native_service, pop_submit_seconds
from runtime.native.accounts.keys import create_user
from runtime.native.db.tables import WaitingPrompt
from runtime.native.queue.sweep import utcnow
from runtime.native.server import NativeService
from runtime.stores.database import transaction

QUEUED = 10_000
WORKERS = 8
CYCLES = 2_000


def main() -> None:
    with native_service() as service:
        run(service)


def run(service: NativeService) -> None:
    now = utcnow()
    with transaction(service.context.sessions) as session:
        requester, _ = create_user(session, "bench-requester", kudos=10**6)
        keys = [create_user(session, f"bench-worker-{i}")[1] for i in range(WORKERS)]
        session.add_all(
            WaitingPrompt(
                id=uuid.uuid4(), user_id=requester.id, prompt="bench", params={"max_length": 80},
                n=1, jobs=1, max_length=80, max_context_length=2048, models=[], workers=[],
                extra_priority=i % 100, kudos_estimate=1, created=now,
                expiry=now + timedelta(hours=1),
            )
            for i in range(QUEUED)
        )  # fmt: skip
    analyze(service)
    elapsed = pop_submit_seconds(
        service,
        keys,
        CYCLES,
        pop_body=lambda index: {"name": f"w{index}"},
        submit_body=lambda job: {"id": job["id"], "generation": "x" * 100},
    )
    print(f"queued={QUEUED} workers={WORKERS} cycles={CYCLES}")
    print(f"pop+submit cycles per second: {CYCLES / elapsed:.1f}")


if __name__ == "__main__":
    main()
