"""``horde-chat front --processes N``: several server processes on one port share
their metrics (prometheus-client's multiprocess mode), and a stopping front drains.

The front runs as an operator runs it, a process (``horde-chat front --processes 2``) in
front of the session's native API, with the test chat worker (tests/support/chat_worker.py).

- /metrics parses as Prometheus text, and what it reports is the whole front's: requests
  made on fresh connections (spread over both processes) are counted once each in every
  scrape, whichever process answers it; open waits are back to zero once answered.
- SIGTERM to the parent: a request already waiting is answered if its reply comes within
  the shutdown grace; one still waiting when the grace ends is answered 503
  front_shutting_down in OpenAI's envelope (x-should-retry: false: it had been submitted)
  and cancelled on the native API, which charges nothing for it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from runtime.native.db.tables import KudosLedger, WaitingPrompt
from runtime.native.server import NativeService
from runtime.stores.database import transaction
from runtime.stores.embedded import EmbeddedStores
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.integration.test_service_commands import Running, command_env
from tests.support.chat_worker import ChatTestWorker, echo_reply
from tests.support.front import answer_once_waiting

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FRONT_LINE = r"chat front: (http://127\.0\.0\.1:\d+)/v1"
SETTLE = 0.3
"""Seconds from the front's wait being open to the worker's answer (``answer_once_waiting``)."""
SHORT_GRACE = "3"
"""HORDE_FRONT_SHUTDOWN_GRACE for the drain test only: the shipped 20 s would hold the test
for 20 s to show the same thing."""


def front_env(tmp: Path, stores: EmbeddedStores, **extra: str) -> dict[str, str]:
    return command_env(
        tmp,
        HORDE_REDIS_URL=stores.redis_url,
        HORDE_SERVICE_PASSKEY=SERVICE_PASSKEY,
        **extra,
    )


@pytest.fixture
def front_processes(
    horde_stores: EmbeddedStores,
    native_service: NativeService,
    native_db: sessionmaker[Session],
    tmp_path: Path,
) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    root = native_service.url

    def start(processes: int = 2, **env: str) -> Running:
        front = Running(
            ["front", "--port", "0", "--processes", str(processes), "--native-roots", root],
            front_env(tmp_path, horde_stores, **env),
            FRONT_LINE,
        )
        started.append(front)
        return front

    yield start
    for front in started:
        front.stop()  # a process already ended: its pipes are closed


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """/metrics of ``url`` parsed: sample name -> sorted labels -> value."""
    response = httpx.get(url + "/metrics", timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def chat(front_url: str, model: str, api_key: str, text: str = "Hello") -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": text}]}
    headers = {"authorization": f"Bearer {api_key}"}
    # a fresh connection each time: the kernel hands it to either process
    return httpx.post(front_url + "/v1/chat/completions", json=body, headers=headers, timeout=60)


def test_metrics_of_a_front_on_two_processes_count_every_process(
    front_processes: Callable[..., Running],
    native_url: str,
    requester: MadeUser,
    owner: MadeUser,
) -> None:
    front = front_processes(2)
    wait_ready(front.url)

    # answered once the wait sleeps, so it is woken (counted), not served from the outcome key
    respond = answer_once_waiting(front.url, echo_reply, SETTLE)
    with ChatTestWorker(native_url, owner.api_key, model="metrics-model", respond=respond):
        answered = chat(front.url, "metrics-model", requester.api_key)
        assert answered.status_code == 200, answered.text
        models = 8
        for _ in range(models):
            listed = httpx.get(front.url + "/v1/models", timeout=10)
            assert listed.status_code == 200, listed.text
    route = (("method", "GET"), ("route", "/v1/models"), ("status", "200"))
    chat_route = (("method", "POST"), ("route", "/v1/chat/completions"), ("status", "200"))
    for _ in range(4):  # each scrape on a new connection, answered by either process
        found = scrape(front.url)
        assert found["horde_http_requests_total"][route] == models
        assert found["horde_http_requests_total"][chat_route] == 1
        assert found["horde_http_request_duration_seconds_count"][route[:2]] == models
        assert found["horde_front_open_waits"][()] == 0
        assert sum(found["horde_front_wait_wakes_total"].values()) >= 1


def test_metrics_of_a_native_api_on_two_processes_count_every_process(
    horde_stores: EmbeddedStores, native_db: sessionmaker[Session], tmp_path: Path
) -> None:
    env = front_env(tmp_path, horde_stores, HORDE_DATABASE_URL=horde_stores.database_url)
    native = Running(
        ["native", "--port", "0", "--processes", "2"],
        env,
        r"native API: (http://127\.0\.0\.1:\d+)/api/v2",
    )
    try:
        wait_ready(native.url)
        probes = 8
        for _ in range(probes):  # fresh connections: the kernel hands them to either process
            assert httpx.get(native.url + "/healthz", timeout=10).status_code == 200
        route = (("method", "GET"), ("route", "/healthz"), ("status", "200"))
        for _ in range(4):
            found = scrape(native.url)
            assert found["horde_http_requests_total"][route] == probes
            assert found["horde_http_request_duration_seconds_count"][route[:2]] == probes
    finally:
        assert native.stop() == 0
    assert "Traceback" not in "".join(native.stderr)


def test_a_stopping_front_answers_what_it_can_and_cancels_the_rest_uncharged(
    front_processes: Callable[..., Running],
    native_url: str,
    native_db: sessionmaker[Session],
    requester: MadeUser,
    owner: MadeUser,
) -> None:
    front = front_processes(2, HORDE_FRONT_SHUTDOWN_GRACE=SHORT_GRACE)
    wait_ready(front.url)
    held = ChatTestWorker(
        native_url, owner.api_key, model="held", respond=lambda job: None, name="holder"
    )
    late = ChatTestWorker(native_url, owner.api_key, model="late", name="late")
    with held, late, ThreadPoolExecutor(3) as pool:
        late.pause()
        never: Future[httpx.Response] = pool.submit(chat, front.url, "held", requester.api_key)
        answered: Future[httpx.Response] = pool.submit(chat, front.url, "late", requester.api_key)
        streamed: Future[list[str]] = pool.submit(stream, front.url, "held", requester.api_key)
        wait_for(lambda: len(held.jobs) == 2 and queued(native_db, "late"))
        front.process.send_signal(15)  # SIGTERM to the parent, passed on to each process
        late.resume()  # its reply comes within the grace
        stopped = never.result(timeout=60)
        replied = answered.result(timeout=60)
        events = streamed.result(timeout=60)
    assert front.process.wait(timeout=60) == 0
    assert replied.status_code == 200, replied.text
    assert replied.json()["choices"][0]["message"]["content"].startswith("You said")
    assert stopped.status_code == 503, stopped.text
    error = stopped.json()["error"]
    assert error["code"] == "front_shutting_down"
    assert error["type"] == "service_unavailable_error"
    assert stopped.headers["x-should-retry"] == "false"
    request_id = stopped.headers["x-request-id"]
    with transaction(native_db) as session:
        row = session.get(WaitingPrompt, request_id)
        assert row is not None
        assert row.cancelled
        charges = session.scalars(select(KudosLedger).where(KudosLedger.wp_id == row.id)).all()
    # the submission's horde tax (upstream's, taken when a request is queued) stays; the
    # reply's charge never comes, and the worker that held the job is not paid
    assert sorted(c.reason for c in charges) == ["horde_tax"]
    # the stream held open past the grace ends with the error as its last event
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == "front_shutting_down"
    assert "Traceback" not in "".join(front.stderr)


def stream(front_url: str, model: str, api_key: str) -> list[str]:
    """The data of every SSE event of a streamed chat completion."""
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    headers = {"authorization": f"Bearer {api_key}"}
    url = front_url + "/v1/chat/completions"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=60) as response:
        assert response.status_code == 200
        return [
            line.removeprefix("data: ")
            for line in response.iter_lines()
            if line.startswith("data: ")
        ]


def wait_ready(url: str) -> None:
    """Until /readyz answers 200: the server processes start after the parent printed its
    line (the socket is bound, so connections wait in its backlog meanwhile)."""
    ready = httpx.get(url + "/readyz", timeout=120)
    assert ready.status_code == 200, ready.text


def queued(sessions: sessionmaker[Session], model: str) -> bool:
    with transaction(sessions) as session:
        rows = session.scalars(select(WaitingPrompt).where(WaitingPrompt.active)).all()
    return any(model in (row.models or []) for row in rows)


def wait_for(check: Callable[[], Any], timeout: float = 30.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.05)):
        if check():
            return
        done.wait(0.05)
    raise AssertionError("the condition never held")
