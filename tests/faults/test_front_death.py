"""A front process SIGKILLed while its clients wait: ``horde-chat front`` runs
as an operator runs it, on the suite's Redis and native API; three requests wait for a
paused worker, the front is killed, and the worker then serves the queue. Nothing cancels
the requests (the front is gone), so each is served by the worker and charged once: none
is lost in the queue, none charged twice; a restarted front answers again.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import httpx
import pytest

from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.faults.support import MESSAGES, MODEL, charge_entries, chat_rows
from tests.integration.test_service_commands import Running, command_env
from tests.support.chat_worker import ChatTestWorker
from tests.support.waiting import until

pytestmark = [pytest.mark.faults, pytest.mark.integration]

WAITS = 3
FRONT_LINE = r"chat front: (http://127\.0\.0\.1:\d+)/v1"


def start_front(tmp: Path, stores: EmbeddedStores, native: NativeService) -> Running:
    env = command_env(
        tmp,
        HORDE_REDIS_URL=stores.redis_url,
        HORDE_SERVICE_PASSKEY=SERVICE_PASSKEY,
    )
    return Running(["front", "--port", "0", "--native-roots", native.url], env, FRONT_LINE)


def test_requests_of_a_killed_front_are_served_and_charged_once(
    tmp_path: Path,
    fault_stores: EmbeddedStores,
    fault_native: NativeService,
    users: tuple[MadeUser, MadeUser],
) -> None:
    requester, owner = users
    native_url = f"{fault_native.url}/api/v2"
    sessions = fault_native.context.sessions
    outcomes: list[object] = []
    front = start_front(tmp_path, fault_stores, fault_native)
    with ChatTestWorker(native_url, owner.api_key, model=MODEL) as worker:
        worker.pause()

        def wait() -> None:
            try:
                got = httpx.post(
                    f"{front.url}/v1/chat/completions",
                    headers={"Authorization": f"Bearer {requester.api_key}"},
                    json={"model": MODEL, "messages": MESSAGES},
                    timeout=60,
                )
                outcomes.append(got.status_code)
            except httpx.TransportError as cut:
                outcomes.append(type(cut).__name__)

        clients = [threading.Thread(target=wait) for _ in range(WAITS)]
        for thread in clients:
            thread.start()
            threading.Event().wait(0.6)  # the native submit limit: 2 a second per client
        until(lambda: len(chat_rows(sessions)) == WAITS, "every request queued")
        front.process.send_signal(signal.SIGKILL)
        front.process.wait(10)
        for thread in clients:
            thread.join(60)
        worker.resume()
        ids = [str(row.id) for row in chat_rows(sessions)]
        until(lambda: len(worker.submits) == WAITS, "the queue served", 60)
    assert not any(thread.is_alive() for thread in clients)
    assert all(isinstance(outcome, str) for outcome in outcomes), outcomes  # cut, not answered
    assert [s.status_code for s in worker.submits] == [200] * WAITS
    assert charge_entries(sessions, requester.id) == dict.fromkeys(ids, 1)
    again = start_front(tmp_path, fault_stores, fault_native)
    try:
        models = httpx.get(f"{again.url}/v1/models", timeout=30)
        assert models.status_code == 200
    finally:
        assert again.stop() == 0
    for pipe in (front.process.stdout, front.process.stderr):
        if pipe is not None:
            pipe.close()
