"""The embedded PostgreSQL stopped and started again under load: a requester
submits chat requests to the native API at a steady pace while a worker serves them (its
submits through the real worker's client, runtime/worker/horde.py, which repeats a submit
answered 5xx or lost). The native API must come back without a process restart (its pool
replaces the connections the restart broke), answer the outage in its envelope (503, never
a 500), lose no reply of a request it accepted, and answer no 5xx once it is back.
Prints ``figure: postgres_restart_recovery = <s> s`` (stopped to the first accepted submit).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from runtime.stores.embedded_postgres import EmbeddedPostgres
from runtime.worker.horde import HordeClient
from tests.conftest import MadeUser
from tests.faults.support import MESSAGES, MODEL, charge_entries
from tests.support.chat_worker import ChatTestWorker
from tests.support.waiting import until

pytestmark = [pytest.mark.faults, pytest.mark.integration]

PACE = 0.6  # seconds between submits: under the shipped 2 a second of one client
RECOVERY = 30.0  # the bound for throughput to come back
AFTER = 6  # submits that must all be accepted once it is back


def test_a_postgres_restart_under_load_loses_no_reply_and_leaves_no_5xx(
    fault_stores: EmbeddedStores,
    fault_native: NativeService,
    users: tuple[MadeUser, MadeUser],
) -> None:
    requester, owner = users
    native_url = f"{fault_native.url}/api/v2"
    horde = HordeClient(fault_native.url, owner.api_key)

    def serve(job: dict[str, Any]) -> None:  # the real worker's submit, repeats and all
        horde.submit({"id": job["id"], "content": "Served.", "finish_reason": "stop"})  # type: ignore[typeddict-item]
        return None

    accepted: list[str] = []
    answers: list[tuple[float, int, Any]] = []  # (when, status, body) of every submit
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(base_url=native_url, timeout=30) as client:
            while not stop.is_set():
                try:
                    got = client.post(
                        "/generate/chat/async",
                        headers={"apikey": requester.api_key},
                        json={"model": MODEL, "messages": MESSAGES, "max_tokens": 20},
                    )
                    body = got.json()
                except httpx.TransportError as lost:
                    answers.append((time.monotonic(), 0, str(lost)))
                else:
                    answers.append((time.monotonic(), got.status_code, body))
                    if got.status_code == 202:
                        accepted.append(str(body["id"]))
                stop.wait(PACE)

    loader = threading.Thread(target=load)
    with ChatTestWorker(native_url, owner.api_key, model=MODEL, respond=serve):  # type: ignore[arg-type]
        loader.start()
        until(lambda: len(accepted) >= 3, "load before the restart")
        postgres = fault_stores.postgres
        assert postgres is not None
        stopped = time.monotonic()
        postgres.stop()
        threading.Event().wait(2.0)
        restarted = EmbeddedPostgres.start(postgres.data_dir)
        assert restarted.url == fault_stores.database_url  # the same socket
        fault_stores.postgres = restarted
        back = until(
            lambda: next((w for w, s, _ in answers if w > stopped and s == 202), None),
            "a submit accepted after the restart",
            RECOVERY,
        )
        count = len(answers)
        until(lambda: len(answers) >= count + AFTER, "load after the restart", RECOVERY)
        stop.set()
        loader.join(30)
        sessions = fault_native.context.sessions
        assert _all_served(native_url, accepted), "every accepted request served"
    horde.close()
    print(f"figure: postgres_restart_recovery = {back - stopped:.1f} s")
    statuses = [s for _, s, _ in answers]
    assert 500 not in statuses, [a for a in answers if a[1] == 500][:3]
    outage = [(s, b) for w, s, b in answers if s >= 500]
    assert all(s == 503 and set(b) >= {"message", "rc"} for s, b in outage), outage[:3]
    assert all(s == 202 for w, s, _ in answers if w > back), answers[-AFTER:]
    assert charge_entries(sessions, requester.id) == dict.fromkeys(accepted, 1)


def _all_served(native_url: str, ids: list[str]) -> bool:
    """Whether each request is done within RECOVERY, each read at most once a second: the
    shipped limit is 60 status reads a minute per request (a 429 is read as not done yet)."""
    pending = set(ids)
    deadline = time.monotonic() + RECOVERY
    with httpx.Client(base_url=native_url, timeout=30) as client:
        while pending and time.monotonic() < deadline:
            for rid in sorted(pending):
                read = client.get(f"/generate/chat/status/{rid}")
                if read.status_code == 200 and read.json()["done"]:
                    pending.discard(rid)
            if pending:
                threading.Event().wait(1.0)
    return not pending
