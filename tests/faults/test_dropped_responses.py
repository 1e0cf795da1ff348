"""Responses lost on the wire (tests/support/dropping_proxy.py: the request reaches the
native API, its answer is dropped and the connection reset), between the front and the
native API and between a worker and the native API.

* Every submit of the front lost: each attempt reached the native API, so
  the Horde holds a queued request the front has no id for. The front cancels it by its
  operation key (DELETE /generate/chat/operation/{key}, as the client's user) before it
  answers: the request ends cancelled and uncharged (the horde tax of its queueing stays).
* A worker's submit answer lost: the real worker's client (runtime/worker/horde.py)
  repeats it; the repeat is refused without a 5xx, the client gets the reply once and is
  charged once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from generated.chat.names import (
    DECL_CHAT_FEATURES,
    DECL_CHAT_JOBS,
    DECL_CHAT_LIMITS,
    DECL_MODEL_ID,
    DECL_PROMPT_JOBS,
)
from generated.chat.tables import FEATURES, GUARANTEES
from runtime.native.db.tables import WaitingPrompt
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from runtime.worker.horde import HordeClient
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.faults.support import MESSAGES, MODEL, charge_entries, chat_rows
from tests.support.chat_worker import ChatTestWorker
from tests.support.dropping_proxy import DroppingProxy, split
from tests.support.front import running_front
from tests.support.waiting import until

pytestmark = [pytest.mark.faults, pytest.mark.integration]

SUBMIT = b"POST /api/v2/generate/chat/async"
ORPHAN_CANCEL = b"DELETE /api/v2/generate/chat/operation/"
WORKER_SUBMIT = b"POST /api/v2/generate/text/submit"


@pytest.fixture
def lossy_front(
    fault_stores: EmbeddedStores, fault_native: NativeService
) -> Iterator[tuple[str, DroppingProxy]]:
    """A front (shipped settings: 3 submit attempts) whose every submit answer is lost."""
    with (
        DroppingProxy(fault_native.port, drop=SUBMIT, times=3) as proxy,
        running_front(fault_stores.redis_url, [proxy.url], service_passkey=SERVICE_PASSKEY) as f,
    ):
        yield f.url, proxy


def test_a_submit_lost_on_every_attempt_leaves_no_queued_charged_orphan(
    fault_native: NativeService,
    lossy_front: tuple[str, DroppingProxy],
    users: tuple[MadeUser, MadeUser],
) -> None:
    front_url, proxy = lossy_front
    requester, owner = users
    native_url = f"{fault_native.url}/api/v2"
    with ChatTestWorker(native_url, owner.api_key, model=MODEL) as worker:
        worker.pause()  # online (the request is admitted), but it serves nothing meanwhile
        answer = httpx.post(
            f"{front_url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {requester.api_key}"},
            json={"model": MODEL, "messages": MESSAGES},
            timeout=120,
        )
        worker.resume()
        sessions = fault_native.context.sessions
        (row,) = chat_rows(sessions)  # three attempts, one request (the operation key)
        assert proxy.dropped == 3
        assert answer.status_code >= 500, answer.text
        assert set(answer.json()) == {"error"}
        # a retry would be a new request, and another horde tax: still not to be retried
        assert answer.headers["x-should-retry"] == "false"
        (cancel,) = proxy.sent(ORPHAN_CANCEL)
        headers, _ = split(cancel)
        assert headers["apikey"] == requester.api_key
        with sessions() as session:
            orphan = session.get(WaitingPrompt, row.id)
            assert orphan is not None
            assert (orphan.cancelled, orphan.active) == (True, False)
        assert worker.jobs == []
    assert charge_entries(sessions, requester.id) == {}


def test_only_the_user_who_submitted_cancels_by_operation_key(
    fault_native: NativeService, users: tuple[MadeUser, MadeUser]
) -> None:
    requester, owner = users
    native_url = f"{fault_native.url}/api/v2"
    key = uuid.uuid4().hex
    path = f"/generate/chat/operation/{key}"
    with (
        ChatTestWorker(native_url, owner.api_key, model=MODEL),
        httpx.Client(base_url=native_url, timeout=30) as native,
    ):
        queued = native.post(
            "/generate/chat/async",
            headers={"apikey": requester.api_key, "X-Operation-Key": key},
            json={"model": MODEL, "messages": MESSAGES},
        )
        assert queued.status_code == 202, queued.text
        other = native.delete(path, headers={"apikey": owner.api_key})
        assert (other.status_code, other.json()["rc"]) == (404, "RequestNotFound")
        keyless = native.delete(path)
        assert 400 <= keyless.status_code < 500
        assert set(keyless.json()) >= {"message", "rc"}
        wrong = native.delete(path, headers={"apikey": "not-a-key"})
        assert (wrong.status_code, wrong.json()["rc"]) == (401, "InvalidAPIKey")
        unknown = native.delete(path + "x", headers={"apikey": requester.api_key})
        assert unknown.status_code == 404
        mine = native.delete(path, headers={"apikey": requester.api_key})
        assert mine.status_code == 200, mine.text
        assert mine.json()["faulted"] is False
    with fault_native.context.sessions() as session:
        orphan = session.get(WaitingPrompt, uuid.UUID(queued.json()["id"]))
        assert orphan is not None
        assert orphan.cancelled


def pop_body() -> dict[str, Any]:
    return {
        "name": "lossy-worker",
        "models": [MODEL],
        "max_length": 512,
        "max_context_length": 4096,
        DECL_CHAT_JOBS: True,
        DECL_MODEL_ID: MODEL,
        DECL_CHAT_FEATURES: [*FEATURES, *GUARANTEES],
        DECL_CHAT_LIMITS: {},
        DECL_PROMPT_JOBS: False,
    }


def test_a_worker_whose_submit_answer_is_lost_is_paid_and_its_requester_charged_once(
    fault_native: NativeService, users: tuple[MadeUser, MadeUser]
) -> None:
    requester, owner = users
    native_url = f"{fault_native.url}/api/v2"
    with DroppingProxy(fault_native.port, drop=WORKER_SUBMIT, times=1) as proxy:
        horde = HordeClient(proxy.url, owner.api_key)
        try:
            horde.pop(pop_body())  # online before the request
            queued = httpx.post(
                f"{native_url}/generate/chat/async",
                headers={"apikey": requester.api_key},
                json={"model": MODEL, "messages": MESSAGES},
                timeout=30,
            )
            assert queued.status_code == 202, queued.text
            job_id = until(lambda: horde.pop(pop_body()).get("id"), "the job popped")
            reply = {"id": job_id, "content": "Served.", "finish_reason": "stop"}
            horde.submit(reply)  # type: ignore[arg-type]
        finally:
            horde.close()
        answers = proxy.sent(WORKER_SUBMIT)
    assert proxy.dropped == 1
    assert len(answers) >= 2  # the lost one and its repeat
    request_id = queued.json()["id"]
    status = httpx.get(f"{native_url}/generate/chat/status/{request_id}", timeout=30).json()
    assert status["done"] is True
    assert [g["content"] for g in status["generations"]] == ["Served."]
    sessions = fault_native.context.sessions
    assert charge_entries(sessions, requester.id) == {request_id: 1}
