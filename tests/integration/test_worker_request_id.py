"""The request id follows a request to the worker's log: the native API keeps the
x-request-id of the call that submitted a request (``origin_id``), hands it out in the pop
payload, and the worker names it in its log lines for that job (taken, and how it ended).

Through the front, that id is the one the front made for the client's call: its access line
names it as ``origin_id``, the native API's lines as ``request_id``, and so does the worker.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from runtime.native.server import NativeService
from runtime.observability.access_log import LOGGER_PREFIX
from runtime.observability.context import REQUEST_ID_HEADER
from runtime.stores.embedded import EmbeddedStores
from runtime.worker.config import WorkerConfig
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.doubles.backend_script import Reply
from tests.doubles.openai_backend import OpenAIBackendDouble
from tests.integration.native_flow import pop
from tests.support.front import running_front
from tests.support.workers import until_listed

pytestmark = pytest.mark.integration

WORKER_LOGGER = "horde-chat.worker"
TRACE = "trace-d7f3.client:42"
"""A caller's own x-request-id (a plain token the native API keeps as it is)."""
REPLY = "Hello from the double."


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def captured() -> Iterator[Callable[[str], list[str]]]:
    """The lines logged by the worker and by both services' access logs during the test."""
    handlers: dict[str, Lines] = {}
    levels: dict[str, int] = {}
    for name in (WORKER_LOGGER, LOGGER_PREFIX + "front", LOGGER_PREFIX + "native"):
        logger = logging.getLogger(name)
        handlers[name], levels[name] = Lines(), logger.level
        logger.addHandler(handlers[name])
        logger.setLevel(logging.INFO)  # as the services and the worker's CLI log
    try:
        yield lambda name: handlers[name].lines
    finally:
        for name, handler in handlers.items():
            logging.getLogger(name).removeHandler(handler)
            logging.getLogger(name).setLevel(levels[name])


def test_a_pop_hands_out_the_request_id_of_the_submitting_call(
    native_client: httpx.Client, make_user: Callable[..., MadeUser]
) -> None:
    requester, owner = make_user("req", kudos=100), make_user("owner")
    body = {"prompt": "Once upon a time", "params": {"max_length": 80}}
    traced = native_client.post(
        "/generate/text/async",
        headers={"apikey": requester.api_key, REQUEST_ID_HEADER: TRACE},
        json=body,
    )
    assert traced.status_code == 202, traced.text
    assert traced.headers[REQUEST_ID_HEADER] == TRACE
    untraced = native_client.post(
        "/generate/text/async", headers={"apikey": requester.api_key}, json=body
    )
    assert untraced.status_code == 202, untraced.text
    made = untraced.headers[REQUEST_ID_HEADER]  # the native API made one
    assert made != TRACE
    first = pop(native_client, owner.api_key)
    second = pop(native_client, owner.api_key)
    assert first["origin_id"] == TRACE
    assert second["origin_id"] == made


@pytest.fixture
def backend() -> Iterator[OpenAIBackendDouble]:
    double = OpenAIBackendDouble(default_reply=Reply(content=REPLY)).start()
    try:
        yield double
    finally:
        double.close()


def test_the_worker_logs_the_front_request_id_of_the_job_it_serves(
    horde_stores: EmbeddedStores,
    native_service: NativeService,
    native_client: httpx.Client,
    make_user: Callable[..., MadeUser],
    backend: OpenAIBackendDouble,
    captured: Callable[[str], list[str]],
) -> None:
    from runtime.worker.cli import RunningWorker

    requester, owner = make_user("req", kudos=1000), make_user("owner")
    config = WorkerConfig(
        native_service.url, owner.api_key, backend.openai_base_url, context=4096, poll_interval=0.05
    )
    worker = RunningWorker.start(config)
    try:
        until_listed(native_client)
        with running_front(
            horde_stores.redis_url, [native_service.url], service_passkey=SERVICE_PASSKEY
        ) as front:
            client = openai.OpenAI(base_url=front.url + "/v1", api_key=requester.api_key)
            with client:
                raw = client.chat.completions.with_raw_response.create(
                    model=worker.probed.model_id,
                    messages=[{"role": "user", "content": "Say hello."}],
                )
            reply: Any = raw.parse()
            horde_id = raw.headers[REQUEST_ID_HEADER]
    finally:
        worker.stop(grace=5)
    assert reply.choices[0].message.content == REPLY
    # the front's access line for the call: the horde request id, and the id it made first
    front_line = next(
        line
        for line in captured(LOGGER_PREFIX + "front")
        if "POST /v1/chat/completions 200" in line and f"request_id={horde_id}" in line
    )
    found = re.search(r" origin_id=(\S+)", front_line)
    assert found is not None, front_line
    front_id = found.group(1)
    assert front_id != horde_id
    # the native API's line for the submit names the front's id
    assert any(
        "POST /api/v2/generate/chat/async 202" in line and f"request_id={front_id}" in line
        for line in captured(LOGGER_PREFIX + "native")
    )
    # the worker's lines for the job name it too: taken, then submitted
    worker_lines = [line for line in captured(WORKER_LOGGER) if f"request_id={front_id}" in line]
    assert len(worker_lines) == 2, captured(WORKER_LOGGER)
    taken, ended = worker_lines
    assert re.fullmatch(rf"job \S+ \(chat, request_id={re.escape(front_id)}\): taken", taken)
    assert ended == taken.removesuffix("taken") + "submitted"
