"""Pop+submit cycles per second on the embedded servers, 10,000 text requests queued.

Prints a figure, never passes or fails on time. Workers are threads with their own HTTP
clients; each cycle is one pop (FOR UPDATE SKIP LOCKED) and one submit (compare-and-set).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.config import Settings
from runtime.native.auth import create_user
from runtime.native.lifecycle import utcnow
from runtime.native.models import WaitingPrompt
from runtime.native.schema import upgrade
from runtime.native.server import NativeService
from runtime.stores.database import transaction
from runtime.stores.embedded import EmbeddedStores

QUEUED = 10_000
WORKERS = 8
CYCLES = 2_000


def main() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="horde-bench-"))
    stores = EmbeddedStores.start(Settings(data_dir=data_dir))
    try:
        upgrade(stores.database_url)
        service = NativeService.start(
            Settings(rate_limits_enabled=False, data_dir=data_dir),
            database_url=stores.database_url,
            redis_url=stores.redis_url,
            port=0,
            sweep=False,
        )
        try:
            run(service)
        finally:
            service.stop()
    finally:
        stores.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


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
    done = 0
    lock = threading.Lock()

    def work(index: int) -> None:
        nonlocal done
        headers = {"apikey": keys[index]}
        with httpx.Client(base_url=f"{service.url}/api/v2", headers=headers) as client:
            while True:
                with lock:
                    if done >= CYCLES:
                        return
                    done += 1
                popped = client.post("/generate/text/pop", json={"name": f"w{index}"})
                popped.raise_for_status()
                job = popped.json()
                result = client.post(
                    "/generate/text/submit", json={"id": job["id"], "generation": "x" * 100}
                )
                result.raise_for_status()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(WORKERS)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    print(f"queued={QUEUED} workers={WORKERS} cycles={CYCLES}")
    print(f"pop+submit cycles per second: {CYCLES / elapsed:.1f}")


if __name__ == "__main__":
    main()
