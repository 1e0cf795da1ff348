"""Two native APIs and two fronts on one Postgres and one Redis, as an operator
runs them behind a load balancer: every service is its own ``horde-chat`` process on the
session's embedded stores, each front names both native roots, and test chat workers
(tests/support/chat_worker.py) serve the jobs through the second native API.

200 chat requests go through both fronts (100 each), from 20 requesters each on its own
loopback address and key, ten requests in a row each: the shipped rate limits (2 submits a
second and 90 a minute per address and per key) hold for each of them, so no limit is
raised. When 60 have been answered, SIGTERM goes to the first native API and to the second
front at once. Then:

- every request sent to the surviving front is answered 200 (its calls to the stopped native
  API fail over to the other root);
- a client of the stopped front gets its answer, or a clean refusal in OpenAI's envelope
  (503 front_shutting_down), or cannot reach it any more: the connection is refused, or the
  keep-alive connection it sends on is the idle one the stopping server closes (a race no
  server avoids: the request was never read). That no request was submitted and then
  dropped is shown by the database: every queued request was answered to some client;
- nothing is charged twice: every queued request was reported to exactly one client (no
  failover resubmitted one), carries at most one charge, and each answered one exactly one.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from runtime.native.db.tables import KudosLedger, WaitingPrompt
from runtime.stores.database import transaction
from runtime.stores.embedded import EmbeddedStores
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.integration.test_service_commands import Running, command_env
from tests.support.chat_worker import ChatTestWorker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODEL = "multi-instance"
REQUESTERS = 20
PER_REQUESTER = 10
STOP_AFTER = 60
"""Answers before the first native API and the second front are sent SIGTERM."""
NATIVE_LINE = r"native API: (http://127\.0\.0\.1:\d+)/api/v2"
FRONT_LINE = r"chat front: (http://127\.0\.0\.1:\d+)/v1"
SHUTTING_DOWN = "front_shutting_down"


@dataclass
class Outcomes:
    """What the clients saw, per front."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    answered: int = 0
    results: list[tuple[str, int, str, str]] = field(default_factory=list)
    """(front, status, x-request-id, error code or '') per response."""
    unreachable: int = 0
    broken: list[str] = field(default_factory=list)

    def of(self, which: str) -> list[int]:
        return [status for front, status, _, _ in self.results if front == which]


@pytest.fixture
def horde(
    horde_stores: EmbeddedStores, native_db: sessionmaker[Session], tmp_path: Path
) -> Iterator[dict[str, Running]]:
    env = command_env(
        tmp_path,
        HORDE_DATABASE_URL=horde_stores.database_url,
        HORDE_REDIS_URL=horde_stores.redis_url,
        HORDE_SERVICE_PASSKEY=SERVICE_PASSKEY,
    )
    started: dict[str, Running] = {}
    try:
        for name in ("native_stopped", "native_kept"):
            started[name] = Running(["native", "--port", "0"], env, NATIVE_LINE)
        roots = f"{started['native_stopped'].url},{started['native_kept'].url}"
        for name in ("front_kept", "front_stopped"):
            started[name] = Running(
                ["front", "--port", "0", "--native-roots", roots], env, FRONT_LINE
            )
        for service in started.values():
            ready = httpx.get(service.url + "/readyz", timeout=120)
            assert ready.status_code == 200, ready.text
        yield started
    finally:
        for service in started.values():
            service.stop()  # one already stopped: its pipes are closed


def client_run(
    front_url: str, which: str, user: MadeUser, address: str, outcomes: Outcomes
) -> None:
    transport = httpx.HTTPTransport(local_address=address)
    headers = {"authorization": f"Bearer {user.api_key}"}
    with httpx.Client(transport=transport, headers=headers, timeout=120) as client:
        for turn in range(PER_REQUESTER):
            body = {"model": MODEL, "messages": [{"role": "user", "content": f"n{turn}"}]}
            try:
                response = client.post(front_url + "/v1/chat/completions", json=body)
            except httpx.TransportError as exc:
                with outcomes.lock:
                    if which == "stopped":  # it stopped listening, or closed an idle connection
                        outcomes.unreachable += 1  # as this request went out on it
                    else:
                        outcomes.broken.append(f"{which}: {type(exc).__name__}: {exc}")
                return
            code = "" if response.status_code == 200 else str(response.json()["error"]["code"])
            with outcomes.lock:
                request_id = response.headers.get("x-request-id", "")
                outcomes.results.append((which, response.status_code, request_id, code))
                outcomes.answered += response.status_code == 200
            if response.status_code != 200:
                return


def test_two_natives_two_fronts_survive_a_sigterm_of_one_each_without_double_charges(
    horde: dict[str, Running],
    native_db: sessionmaker[Session],
    make_user: Callable[..., MadeUser],
    owner: MadeUser,
) -> None:
    users = [make_user(f"requester-{i}", kudos=10_000) for i in range(REQUESTERS)]
    kept_native = horde["native_kept"].url + "/api/v2"
    workers = [
        ChatTestWorker(kept_native, owner.api_key, model=MODEL, name=f"multi-{i}") for i in (1, 2)
    ]
    outcomes = Outcomes()
    fronts = {"kept": horde["front_kept"].url, "stopped": horde["front_stopped"].url}
    threads = [
        threading.Thread(
            target=client_run,
            args=(
                fronts["kept" if i % 2 == 0 else "stopped"],
                "kept" if i % 2 == 0 else "stopped",
                user,
                f"127.0.0.{10 + i}",
                outcomes,
            ),
        )
        for i, user in enumerate(users)
    ]
    with workers[0], workers[1]:
        for thread in threads:
            thread.start()
        stopping = threading.Event()
        while not stopping.wait(0.05):
            with outcomes.lock:
                if outcomes.answered >= STOP_AFTER:
                    break
        for name in ("native_stopped", "front_stopped"):
            horde[name].process.send_signal(15)
        for thread in threads:
            thread.join(timeout=300)
        assert not any(thread.is_alive() for thread in threads)
    for name in ("native_stopped", "front_stopped"):
        assert horde[name].process.wait(timeout=60) == 0

    assert outcomes.broken == []
    refusals = [result for result in outcomes.results if result[1] != 200]
    said = [line for line in horde["front_kept"].stderr if " 200 " not in line][-40:]
    # all answered (else: what the clients were refused, and what the kept front logged)
    assert outcomes.of("kept") == [200] * (REQUESTERS // 2 * PER_REQUESTER), (refusals, said)
    stopped = outcomes.of("stopped")
    assert set(stopped) <= {200, 503}
    assert {code for _, _, _, code in outcomes.results} <= {"", SHUTTING_DOWN}
    assert 0 < stopped.count(200) < REQUESTERS // 2 * PER_REQUESTER  # stopped mid-run

    horde_ids = [rid for _, _, rid, _ in outcomes.results if not rid.startswith("front-")]
    assert len(horde_ids) == len(set(horde_ids))
    with transaction(native_db) as session:
        queued = {
            str(wp_id)
            for (wp_id,) in session.execute(
                select(WaitingPrompt.id).where(WaitingPrompt.user_id.in_([u.id for u in users]))
            )
        }
        charges = Counter(
            {
                str(wp_id): count
                for wp_id, count in session.execute(
                    select(KudosLedger.wp_id, func.count())
                    .where(KudosLedger.reason == "charge", KudosLedger.wp_id.is_not(None))
                    .group_by(KudosLedger.wp_id)
                )
            }
        )
    assert queued == set(horde_ids)  # each queued request reached exactly one client
    assert max(charges.values()) == 1  # nothing charged twice
    answered = {rid for _, status, rid, _ in outcomes.results if status == 200}
    assert all(charges[rid] == 1 for rid in answered)  # each answer charged once
    refused = {rid for _, status, rid, _ in outcomes.results if status != 200} & queued
    assert all(charges[rid] == 0 for rid in refused)  # a cancelled one not at all
