"""What an operator sees of the running services: /healthz, /readyz, /metrics and
the access log, on the native API (tests/conftest.py's native_service) and on a front in
front of it, driven by the official openai SDK with a test chat worker serving the jobs.

/metrics is parsed with prometheus_client's own parser; the access log is read from the
services' loggers (a handler added for the test): one line per request, the front's request
id on the native API's lines, never the API key.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from runtime.config import Settings
from runtime.native.db.migrate import head_revision, upgrade
from runtime.native.server import NativeService
from runtime.observability.access_log import LOGGER_PREFIX
from runtime.stores.embedded import EmbeddedStores
from runtime.stores.embedded_redis import EmbeddedRedis
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.integration.chat_flow import chat_async, chat_body, chat_pop
from tests.support.chat_worker import ChatTestWorker, Respond, echo_reply
from tests.support.front import answer_once_waiting, running_front

pytestmark = pytest.mark.integration

MODEL = "operator-model"
SETTLE = 0.05
"""Seconds from the front's wait being open to the worker's answer (``answer_once_waiting``)."""
MESSAGES = [{"role": "user", "content": "Say hello"}]
FAST = {"poll_interval": 0.3, "grace": 2.0, "deadline": 10.0, "queue_info_wait": 0.5}
CHAT_ASYNC = "/api/v2/generate/chat/async"
CHAT_STATUS = "/api/v2/generate/chat/status/<id>"
FRONT_CHAT = "/v1/chat/completions"
BEHIND = "0003"
"""A revision before head: the schema of a database the code outgrew."""

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """Every sample of ``url``/metrics, parsed as Prometheus text."""
    response = httpx.get(url + "/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def access_lines() -> Iterator[dict[str, list[str]]]:
    """The access-log lines of both services while the test runs."""
    handlers = {service: Lines() for service in ("native", "front")}
    for service, handler in handlers.items():
        logging.getLogger(LOGGER_PREFIX + service).addHandler(handler)
    try:
        yield {service: handler.lines for service, handler in handlers.items()}
    finally:
        for service, handler in handlers.items():
            logging.getLogger(LOGGER_PREFIX + service).removeHandler(handler)


def _front(stores: EmbeddedStores, native: NativeService, **budget: float) -> Any:
    """A front on the test's native API and Redis, with these wait budgets."""
    return running_front(
        stores.redis_url,
        [native.url],
        service_passkey=SERVICE_PASSKEY,
        submit_timeout=5.0,
        **budget,
    )


@pytest.fixture
def front_url(
    horde_stores: EmbeddedStores, native_service: NativeService, native_db: Any
) -> Iterator[str]:
    with _front(horde_stores, native_service, **FAST) as front:
        yield front.url


@pytest.fixture
def signalled_front_url(
    horde_stores: EmbeddedStores, native_service: NativeService, native_db: Any
) -> Iterator[str]:
    """A front like ``front_url`` but at the shipped fallback poll period (10 s): the test
    of what a signalled wait costs the native API must not race FAST's 0.3 s poll (a CI
    host where the worker's pop, the settle and its submit took over 0.24 s read the status
    once, and the test failed on its count)."""
    shipped_poll = {name: value for name, value in FAST.items() if name != "poll_interval"}
    with _front(horde_stores, native_service, **shipped_poll) as front:
        yield front.url


@pytest.fixture
def serve(native_url: str, owner: MadeUser) -> Callable[..., ChatTestWorker]:
    def make(respond: Respond = echo_reply) -> ChatTestWorker:
        return ChatTestWorker(native_url, owner.api_key, model=MODEL, respond=respond)

    return make


def chat(front_url: str, api_key: str) -> Any:
    with openai.OpenAI(base_url=front_url + "/v1", api_key=api_key, max_retries=0) as sdk:
        return sdk.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES)


def test_metrics_parse_as_prometheus_text_and_a_chat_request_moves_its_counters(
    serve: Callable[..., ChatTestWorker],
    signalled_front_url: str,
    native_service: NativeService,
    requester: MadeUser,
) -> None:
    front_url = signalled_front_url
    native_before, front_before = scrape(native_service.url), scrape(front_url)

    # answered once the wait sleeps, so it is woken (counted), not served from the outcome key
    with serve(answer_once_waiting(front_url, echo_reply, SETTLE)):
        raw = chat(front_url, requester.api_key)
        assert raw.http_response.status_code == 200
        native_during = scrape(native_service.url)
    native_after, front_after = scrape(native_service.url), scrape(front_url)

    def moved(after: Samples, before: Samples, name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    requests = "horde_http_requests_total"
    assert (
        moved(native_after, native_before, requests, method="POST", route=CHAT_ASYNC, status="202")
        == 1
    )
    assert (
        moved(native_after, native_before, requests, method="GET", route=CHAT_STATUS, status="200")
        == 0  # the lean front answers from the submit's status and the completion's outcome key
    )
    latency = "horde_http_request_duration_seconds_count"
    assert moved(native_after, native_before, latency, method="POST", route=CHAT_ASYNC) == 1
    assert moved(native_after, native_before, "horde_pops_total", kind="chat") == 1
    assert moved(native_after, native_before, "horde_kudos_rewarded_total") > 0
    assert moved(native_after, native_before, "horde_kudos_charged_total", reason="charge") > 0
    assert value(native_during, "horde_workers_online", model=MODEL) == 1
    assert value(native_during, "horde_worker_threads_online", model=MODEL) >= 1

    assert (
        moved(front_after, front_before, requests, method="POST", route=FRONT_CHAT, status="200")
        == 1
    )
    assert moved(front_after, front_before, latency, method="POST", route=FRONT_CHAT) == 1
    wakes = "horde_front_wait_wakes_total"
    assert moved(front_after, front_before, wakes, by="signal") == 1
    assert moved(front_after, front_before, wakes, by="poll") == 0
    assert value(front_after, "horde_front_open_waits") == 0
    assert value(front_after, "horde_front_open_streams") == 0

    # every collection's pause, by generation: a chat request allocates enough for young ones
    pauses = "horde_gc_pause_seconds_count"
    for after, before in ((native_after, native_before), (front_after, front_before)):
        assert (pauses, (("generation", "2"),)) in after  # full ones: listed, however few
        assert moved(after, before, pauses, generation="0") > 0


def test_metrics_count_each_job_a_worker_faulted_once_its_fault_is_recorded(
    native_url: str,
    front_url: str,
    native_service: NativeService,
    owner: MadeUser,
    requester: MadeUser,
) -> None:
    before = value(scrape(native_service.url), "horde_faults_total", kind="chat")
    worker = ChatTestWorker(
        native_url, owner.api_key, model=MODEL, respond=lambda job: {"state": "faulted"}
    )
    with worker, pytest.raises(openai.InternalServerError) as faulted:
        chat(front_url, requester.api_key)  # faulted past the request's limit
    assert faulted.value.status_code == 502
    faults = value(scrape(native_service.url), "horde_faults_total", kind="chat") - before
    assert faults == len(worker.jobs)


def test_metrics_show_queue_depth_oldest_age_and_online_workers_per_model(
    native_service: NativeService,
    native_client: httpx.Client,
    requester: MadeUser,
    owner: MadeUser,
) -> None:
    # a worker of the model checks in (popping nothing), then two requests wait for it
    assert chat_pop(native_client, owner.api_key, model="queued-model")["id"] is None
    for _ in range(2):
        submitted = chat_async(native_client, requester.api_key, chat_body(model="queued-model"))
        assert submitted.status_code == 202, submitted.text
    samples = scrape(native_service.url)
    assert value(samples, "horde_queue_requests", model="queued-model") == 2
    assert ("horde_queue_oldest_age_seconds", (("model", "queued-model"),)) in samples
    assert value(samples, "horde_queue_oldest_age_seconds", model="queued-model") >= 0
    assert value(samples, "horde_queue_requests", model="other-model") == 0
    assert value(samples, "horde_workers_online", model="queued-model") == 1


def test_healthz_and_readyz_answer_on_both_services(
    front_url: str, native_service: NativeService
) -> None:
    for root in (native_service.url, front_url):
        alive = httpx.get(root + "/healthz", timeout=10)
        assert (alive.status_code, alive.json()["status"]) == (200, "ok")
        ready = httpx.get(root + "/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        assert ready.json() == {"status": "ready"}


@pytest.fixture
def database_behind(horde_stores: EmbeddedStores) -> Iterator[str]:
    """A fresh database on the test server, migrated only to BEHIND."""
    name = "behind_" + next(tempfile._get_candidate_names()).lower()
    admin = create_engine(horde_stores.database_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = make_url(horde_stores.database_url).set(database=name)
        database_url = url.render_as_string(hide_password=False)
        upgrade(database_url, BEHIND)
        yield database_url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_readyz_is_503_while_the_schema_is_behind(
    horde_stores: EmbeddedStores, database_behind: str
) -> None:
    objects = Path(tempfile.mkdtemp(prefix="horde-objects-"))
    try:
        service = NativeService.start(
            Settings(data_dir=objects),
            database_url=database_behind,
            redis_url=horde_stores.redis_url,
            host="127.0.0.1",
            port=0,
            sweep=False,
        )
        try:
            ready = httpx.get(service.url + "/readyz", timeout=10)
            alive = httpx.get(service.url + "/healthz", timeout=10)
        finally:
            service.stop()
    finally:
        shutil.rmtree(objects, ignore_errors=True)
    assert alive.status_code == 200
    assert ready.status_code == 503
    body = ready.json()
    assert body["rc"] == "NotReady"
    assert body["message"].startswith(
        f"Not ready to serve: schema behind: the database is at revision {BEHIND}"
    )
    assert head_revision() in body["message"]


LINE = re.compile(
    r"^(?P<service>native|front) (?P<method>[A-Z]+) (?P<route>\S+) (?P<status>\d{3}) "
    r"(?P<ms>\d+\.\d)ms request_id=(?P<request_id>\S+) user=(?P<user>\S+)"
    r"(?: origin_id=(?P<origin>\S+))?$"
)


def test_one_access_line_per_request_names_the_front_request_id_and_never_the_key(
    serve: Callable[..., ChatTestWorker],
    front_url: str,
    requester: MadeUser,
    access_lines: dict[str, list[str]],
    native_db: sessionmaker[Session],
) -> None:
    with serve():
        raw = chat(front_url, requester.api_key)
    response_id = raw.http_response.headers["x-request-id"]
    front = [LINE.match(line) for line in access_lines["front"]]
    assert all(front), access_lines["front"]
    chats = [m for m in front if m and m["route"] == FRONT_CHAT]
    assert len(chats) == 1
    (line,) = chats
    assert (line["method"], line["status"], line["request_id"]) == ("POST", "200", response_id)
    origin = line["origin"]
    assert origin is not None
    assert origin.startswith("front-")
    native = [LINE.match(text_) for text_ in access_lines["native"]]
    assert all(native), access_lines["native"]
    mine = [m for m in native if m and m["request_id"] == origin]
    submits = [m for m in mine if m["route"] == CHAT_ASYNC]
    assert len(submits) == 1
    assert submits[0]["user"] == str(requester.id)
    assert not [m for m in mine if m["route"] == CHAT_STATUS]  # the happy path reads no status
    for logged in access_lines["front"] + access_lines["native"]:
        assert requester.api_key not in logged
        assert "Say hello" not in logged


def test_json_access_lines_with_horde_log_format_json() -> None:
    from runtime.observability.access_log import AccessLog, log_format

    assert log_format({"HORDE_LOG_FORMAT": "json"}) == "json"
    with pytest.raises(ValueError, match="HORDE_LOG_FORMAT"):
        log_format({"HORDE_LOG_FORMAT": "xml"})
    import json

    line = json.loads(
        AccessLog("native", "json").line(
            method="GET", route="/healthz", status=200, latency_ms=1.25, request_id="r", user_id=7
        )
    )
    assert {k: line[k] for k in ("method", "route", "status", "request_id", "user_id")} == {
        "method": "GET",
        "route": "/healthz",
        "status": 200,
        "request_id": "r",
        "user_id": 7,
    }


def test_front_readyz_is_503_not_ready_once_its_redis_is_gone(
    native_service: NativeService,
) -> None:
    data = Path(tempfile.mkdtemp(prefix="horde-front-redis-"))
    redis = EmbeddedRedis.start(data)
    try:
        with running_front(redis.url, [native_service.url], **FAST) as front:
            assert httpx.get(front.url + "/readyz", timeout=10).status_code == 200
            redis.stop()
            ready = httpx.get(front.url + "/readyz", timeout=10)
            alive = httpx.get(front.url + "/healthz", timeout=10)
    finally:
        redis.stop()
        shutil.rmtree(data, ignore_errors=True)
    assert alive.status_code == 200
    assert ready.status_code == 503
    error = ready.json()["error"]
    assert error["code"] == "NotReady"
    assert error["message"].startswith("Not ready to serve: redis unreachable")
