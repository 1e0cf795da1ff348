"""The horde's distrust of workers and its speed samples, through the live native API:
every worker fault counts toward the abort limit, a user's distinct workers
are limited, each generation records its worker's speed sample (which slow_workers, the
wait time and fail_fast read), a censored chat reply is not delivered as an answer, and a
request's webhook gets each finished generation once, through the image fetch's guards.

A second native service runs here with a test policy (a low abort limit) and the test-only
loopback switch, on the same embedded stores as the session's service.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from generated.rate_limits import RATE_LIMITS
from runtime.native.db.tables import Generation, KudosHold, User, Worker
from runtime.native.queue.policy import Policy
from runtime.native.queue.webhooks import SENDER
from runtime.native.server import NativeService
from runtime.stores.database import transaction
from runtime.stores.embedded import EmbeddedStores
from tests.integration.chat_flow import chat_pop, chat_status, submit_chat, submit_reply
from tests.integration.native_flow import ledger, pop, status, submit, submit_text
from tests.support.native import raised, running_native_with_objects

pytestmark = pytest.mark.integration

ABORT_LIMIT = 2
# Its tests queue several text requests in a row from one address and key (speed samples,
# aborts); what they check is the workers' trust, not the submit rate: text_async is raised.
TEST_POLICY = Policy(
    abort_limit_per_hour=ABORT_LIMIT,
    fault_limit=10,
    workers_per_trusted_user=4,
    rate_limits=raised(RATE_LIMITS, "text_async"),
)


@pytest.fixture(scope="module")
def strict_service(horde_stores: EmbeddedStores) -> Iterator[NativeService]:
    with running_native_with_objects(
        horde_stores, "horde-objects-trust-", TEST_POLICY, image_fetch_allow_loopback=True
    ) as service:
        yield service


@pytest.fixture
def client(
    strict_service: NativeService, native_db: sessionmaker[Session]
) -> Iterator[httpx.Client]:
    """A client of the strict service, on the freshly emptied database."""
    with httpx.Client(base_url=f"{strict_service.url}/api/v2", timeout=30) as http:
        yield http


def _pop_response(client: httpx.Client, api_key: str, name: str) -> httpx.Response:
    body = {"name": name, "models": ["test-model-7B"], "max_length": 512}
    return client.post("/generate/text/pop", headers={"apikey": api_key}, json=body)


def _worker(sessions: sessionmaker[Session], name: str) -> Worker:
    with sessions() as session:
        return session.scalars(select(Worker).where(Worker.name == name)).one()


def _started_earlier(sessions: sessionmaker[Session], job_id: str, seconds: float) -> None:
    """Move a running job's pop ``seconds`` into the past: the worker took that long."""
    with transaction(sessions) as session:
        session.execute(
            update(Generation)
            .where(Generation.id == job_id)
            .values(start_time=Generation.start_time - timedelta(seconds=seconds))
        )


# Faults count


def test_every_worker_fault_counts_toward_the_abort_limit_and_another_worker_serves(
    client, native_db, make_user
):
    requester = make_user("requester", kudos=1000)
    faulty, healthy = make_user("faulty-owner"), make_user("healthy-owner")
    assert chat_pop(client, faulty.api_key, name="faulty")["id"] is None  # online first
    request_id = submit_chat(client, requester.api_key)
    for attempt in range(ABORT_LIMIT + 1):
        job = chat_pop(client, faulty.api_key, name="faulty")
        assert job["id"], f"attempt {attempt} found no job"
        overflow = [{"type": "prompt_overflow", "value": "the conversation does not fit"}]
        faulted = submit_reply(
            client, faulty.api_key, job["id"], None, state="faulted", gen_metadata=overflow
        )
        assert faulted.status_code == 200, faulted.text
    refused = client.post(
        "/generate/text/pop",
        headers={"apikey": faulty.api_key},
        json={"name": "faulty", "models": ["chat-model-7B"]},
    )
    assert refused.status_code == 403
    assert refused.json()["rc"] == "WorkerMaintenance"
    reason = _worker(native_db, "faulty").maintenance_reason
    assert reason is not None
    assert f"{ABORT_LIMIT + 1} jobs in the last hour" in reason
    assert reason in refused.json()["message"]
    listed = {w["name"]: w for w in client.get("/workers").json()}
    assert listed["faulty"]["maintenance_mode"] is True
    assert listed["faulty"]["maintenance_reason"] == reason
    # upstream's too-many-jobs-aborted suspicion, on the worker and its owner (flagged)
    assert _worker(native_db, "faulty").suspicion == 1
    with native_db() as session:
        assert session.get(User, faulty.id).suspicion == 1

    job = chat_pop(client, healthy.api_key, name="healthy")
    assert job["id"]
    assert submit_reply(client, healthy.api_key, job["id"], "Hello!").status_code == 200
    done = chat_status(client, request_id)
    assert done["done"] is True
    assert done["faulted"] is False
    assert [g["worker_name"] for g in done["generations"]] == ["healthy"]


def test_a_trusted_owners_worker_past_the_abort_limit_is_paused_but_not_suspected(
    client, native_db, make_user
):
    """Upstream: a trusted user's worker is never suspicious; the abort limit still holds."""
    requester = make_user("requester", kudos=1000)
    trusted = make_user("trusted-owner", trusted=True)
    assert chat_pop(client, trusted.api_key, name="trusted")["id"] is None  # online first
    submit_chat(client, requester.api_key)
    for _ in range(ABORT_LIMIT + 1):
        job = chat_pop(client, trusted.api_key, name="trusted")
        assert job["id"]
        faulted = submit_reply(client, trusted.api_key, job["id"], None, state="faulted")
        assert faulted.status_code == 200, faulted.text
    worker = _worker(native_db, "trusted")
    assert worker.maintenance is True
    assert worker.suspicion == 0
    with native_db() as session:
        assert session.get(User, trusted.id).suspicion == 0


def test_faults_under_the_limit_leave_the_worker_online(client, native_db, make_user):
    requester = make_user("requester", kudos=100)
    owner = make_user("owner")
    submit_text(client, requester.api_key)
    for _ in range(ABORT_LIMIT):
        job = pop(client, owner.api_key)
        assert submit(client, owner.api_key, job["id"], state="faulted").status_code == 200
    assert _worker(native_db, "worker-1").maintenance is False
    assert pop(client, owner.api_key)["id"]


# Per-user worker limits


def test_an_untrusted_user_registers_at_most_three_workers(client, make_user):
    owner = make_user("owner")
    for name in ("w1", "w2", "w3"):
        assert _pop_response(client, owner.api_key, name).status_code == 200
    fourth = _pop_response(client, owner.api_key, "w4")
    assert fourth.status_code == 403
    assert fourth.json()["rc"] == "TooManyWorkers"
    assert "3" in fourth.json()["message"]
    assert _pop_response(client, owner.api_key, "w2").status_code == 200  # known names pop


def test_a_trusted_users_worker_limit_is_the_policys(client, make_user):
    trusted = make_user("trusted-owner", trusted=True)
    for index in range(TEST_POLICY.workers_per_trusted_user):
        assert _pop_response(client, trusted.api_key, f"t{index}").status_code == 200
    over = _pop_response(client, trusted.api_key, "one-more")
    assert over.status_code == 403
    assert over.json()["rc"] == "TooManyWorkersTrusted"


# Speed samples


def _serve_one(
    client: httpx.Client,
    sessions: sessionmaker[Session],
    requester_key: str,
    worker_key: str,
    name: str,
    seconds: float,
) -> None:
    """``name`` serves one 80-token text job that took it ``seconds`` (one speed sample)."""
    submit_text(client, requester_key, max_length=80)
    job = pop(client, worker_key, name=name)
    assert job["id"]
    _started_earlier(sessions, job["id"], seconds)
    assert submit(client, worker_key, job["id"], "x" * 400).status_code == 200


def test_a_generation_records_its_output_over_its_time_as_the_workers_speed(
    client, native_db, make_user
):
    requester, owner = make_user("requester", kudos=1000), make_user("owner")
    assert _worker_speed_before_any_sample(client, owner.api_key, native_db) is None
    _serve_one(client, native_db, requester.api_key, owner.api_key, "worker-1", 200)
    first = _worker(native_db, "worker-1").speed
    assert first is not None
    assert 0.3 <= first <= 0.4  # 80 tokens over 200 s and a little more
    _serve_one(client, native_db, requester.api_key, owner.api_key, "worker-1", 400)
    second = _worker(native_db, "worker-1").speed
    assert second is not None
    assert second < first  # the average of both samples
    listed = {w["name"]: w for w in client.get("/workers").json()}
    assert listed["worker-1"]["performance"] == f"{round(second, 1)} tokens per second"


def _worker_speed_before_any_sample(
    client: httpx.Client, api_key: str, sessions: sessionmaker[Session]
) -> float | None:
    assert _pop_response(client, api_key, "worker-1").status_code == 200
    return _worker(sessions, "worker-1").speed


def test_slow_workers_false_keeps_a_request_from_a_worker_under_the_threshold(
    client, native_db, make_user
):
    requester, owner = make_user("requester", kudos=1000), make_user("owner")
    _serve_one(client, native_db, requester.api_key, owner.api_key, "slow", 200)
    _serve_one(client, native_db, requester.api_key, owner.api_key, "fast", 2)
    slow_speed, fast_speed = _worker(native_db, "slow").speed, _worker(native_db, "fast").speed
    assert slow_speed is not None
    assert slow_speed < 5  # upstream's threshold below 13B
    assert fast_speed is not None
    assert fast_speed >= 5
    body = {"prompt": "Once upon a time", "params": {"max_length": 80}, "slow_workers": False}
    queued = client.post("/generate/text/async", headers={"apikey": requester.api_key}, json=body)
    assert queued.status_code == 202, queued.text
    skipped = pop(client, owner.api_key, name="slow")
    assert skipped["id"] is None
    assert skipped["skipped"] == {"performance": 1}
    taken = pop(client, owner.api_key, name="fast")
    assert taken["id"]
    assert taken["payload"]["prompt"] == "Once upon a time"


def test_wait_time_follows_the_recorded_speeds_of_the_workers_that_fit(
    client, native_db, make_user
):
    requester, owner = make_user("requester", kudos=1000), make_user("owner")
    _serve_one(client, native_db, requester.api_key, owner.api_key, "slow", 200)
    _serve_one(client, native_db, requester.api_key, owner.api_key, "fast", 20)
    waits = {}
    for name in ("slow", "fast"):  # one request each that only this worker may serve
        worker = _worker(native_db, name)
        body = {"prompt": "Once", "params": {"max_length": 80}, "workers": [str(worker.id)]}
        accepted = client.post(
            "/generate/text/async", headers={"apikey": requester.api_key}, json=body
        )
        assert accepted.status_code == 202, accepted.text
        waits[name] = (status(client, accepted.json()["id"]), worker.speed)
    slow_status, slow_speed = waits["slow"]
    fast_status, fast_speed = waits["fast"]
    assert slow_status["queue_position"] == 0
    assert slow_status["wait_time"] == math.ceil(80 / slow_speed)
    # the fast worker's request waits behind the slow one's (80 tokens) too
    assert fast_status["wait_time"] == math.ceil((80 + 80) / fast_speed)
    assert fast_status["wait_time"] < slow_status["wait_time"]


# Censored replies


def test_a_censored_chat_reply_is_not_delivered_and_charges_nothing(client, native_db, make_user):
    requester, owner = make_user("requester", kudos=100), make_user("owner")
    assert chat_pop(client, owner.api_key)["id"] is None  # a chat worker online
    request_id = submit_chat(client, requester.api_key)
    job = chat_pop(client, owner.api_key)
    censored = submit_reply(client, owner.api_key, job["id"], "the withheld text", state="censored")
    assert censored.status_code == 200, censored.text
    reward = Decimal(str(censored.json()["reward"]))
    assert reward > 0
    done = chat_status(client, request_id)
    assert done["done"] is True
    (generation,) = done["generations"]
    assert generation["state"] == "censored"
    assert generation["content"] is None
    assert generation["tool_calls"] == []
    assert generation["finish_reason"] == "content_filter"
    assert "withheld" not in json.dumps(done)
    assert generation["kudos"] == 0
    assert ledger(native_db, owner.id) == [("reward", reward)]
    assert [reason for reason, _ in ledger(native_db, requester.id)] == ["grant", "horde_tax"]


# Webhooks


class _Receiver(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        type(self).received.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []
    handler = type("Receiver", (_Receiver,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    finally:
        server.shutdown()
        server.server_close()


def test_a_webhook_receives_the_finished_generation_once(client, make_user, receiver):
    url, received = receiver
    requester, owner = make_user("requester", kudos=100), make_user("owner")
    body = {"prompt": "Once upon a time", "params": {"max_length": 80}, "webhook": url}
    accepted = client.post("/generate/text/async", headers={"apikey": requester.api_key}, json=body)
    assert accepted.status_code == 202, accepted.text
    request_id = accepted.json()["id"]
    job = pop(client, owner.api_key)
    landed = submit(client, owner.api_key, job["id"], "The end.", seed=7)
    assert landed.status_code == 200
    SENDER.drain()
    assert len(received) == 1
    (call,) = received
    finished = status(client, request_id)["generations"][0]
    assert call == {**finished, "request": request_id, "kudos": landed.json()["reward"]}


def test_a_webhook_to_an_inside_address_is_not_called(native_client, make_user, receiver):
    """The session's service has no loopback switch: the image fetch's guards refuse it."""
    url, received = receiver
    requester, owner = make_user("requester", kudos=100), make_user("owner")
    body = {"prompt": "Once upon a time", "params": {"max_length": 80}, "webhook": url}
    accepted = native_client.post(
        "/generate/text/async", headers={"apikey": requester.api_key}, json=body
    )
    assert accepted.status_code == 202, accepted.text
    job = pop(native_client, owner.api_key)
    assert submit(native_client, owner.api_key, job["id"]).status_code == 200
    SENDER.drain()
    assert received == []


def test_slow_workers_false_needs_its_kudos_upfront(client, native_db, make_user):
    body = {"prompt": "Once upon a time", "params": {"max_length": 80}, "slow_workers": False}
    poor = make_user("poor")
    refused = client.post("/generate/text/async", headers={"apikey": poor.api_key}, json=body)
    assert refused.status_code == 403
    assert refused.json()["rc"] == "KudosUpfront"
    rich = make_user("rich", kudos=100)
    accepted = client.post("/generate/text/async", headers={"apikey": rich.api_key}, json=body)
    assert accepted.status_code == 202, accepted.text
    with native_db() as session:
        held = session.scalar(select(func.count()).select_from(KudosHold))
    assert held == 1
