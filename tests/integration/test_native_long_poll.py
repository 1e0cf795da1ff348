"""The long-poll pop: a pop that asks to ``wait`` is woken through Redis when a
request is queued, holds no database connection while it waits, answers the empty pop at
its deadline, counts once against the pop rate limit, and one process holds 1,000 of them
on a bounded number of threads. A pop without ``wait`` answers at once, as upstream's.

The woken tests ask for the spec's longest wait while their own client gives up far sooner
(``CLIENT_TIMEOUT``): a pop answered only at its deadline would fail them. They prove the
wake by the job being returned and by the process's count of wake messages, not by time.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from generated.rate_limits import KEY_PEER, RATE_LIMITS
from generated.signals import POP_MAX_WAIT_SECONDS, WAKE_CHANNEL
from runtime.body_caps import DEFAULT_MAX_BODY_BYTES
from runtime.native import asgi
from runtime.native.api import worker_views
from runtime.native.asgi import THREADS, WORKER_LANE_THREADS
from runtime.native.queue import wake
from runtime.native.queue.policy import Policy
from runtime.native.queue.sweep import sweep, utcnow
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from runtime.tables.rate_limits import RateLimit
from tests.conftest import MadeUser
from tests.integration.native_flow import submit_text
from tests.support.native import (
    forget_rate_limit_counts,
    raised,
    route_limits,
    running_native_with_objects,
)
from tests.support.waiting import until

CLIENT_TIMEOUT = 10.0
"""The test client's own timeout, far below POP_MAX_WAIT_SECONDS."""
POP_BODY: dict[str, Any] = {"name": "long-poller", "models": ["test-model-7B"], "max_length": 512}


class WaitingPop:
    """A pop with ``wait`` sent from its own thread; ``.response`` once it is answered."""

    def __init__(self, url: str, api_key: str, wait: float, **fields: Any) -> None:
        self.response: httpx.Response | None = None
        body = {**POP_BODY, "wait": wait, **fields}
        self._thread = threading.Thread(target=self._run, args=(url, api_key, body), daemon=True)
        self._thread.start()

    def _run(self, url: str, api_key: str, body: dict[str, Any]) -> None:
        with httpx.Client(base_url=url, timeout=CLIENT_TIMEOUT) as client:
            self.response = client.post(
                "/generate/text/pop", headers={"apikey": api_key}, json=body
            )

    def answer(self) -> httpx.Response:
        self._thread.join(timeout=CLIENT_TIMEOUT + 5)
        assert self.response is not None, "the waiting pop was not answered"
        return self.response


@pytest.fixture
def hub(native_service: NativeService) -> Any:
    return native_service.app.hub


def queue_text(native_client: httpx.Client, requester: MadeUser, models: list[str]) -> None:
    """Queue a text request for ``models`` (its wake names them)."""
    body = {"prompt": "Once upon a time", "models": models, "params": {"max_length": 80}}
    queued = native_client.post(
        "/generate/text/async", headers={"apikey": requester.api_key}, json=body
    )
    assert queued.status_code == 202, queued.text


def wake_with_nothing_queued(native_service: NativeService, hub: Any) -> None:
    """Publish a wake with nothing queued; return once the waiting pop, woken, waits again."""
    wakes = hub.wakes
    native_service.context.redis.publish(WAKE_CHANNEL, "1")
    until(lambda: hub.wakes == wakes + 1, "the wake to arrive")
    until(lambda: hub.waiting == 1, "the woken pop to wait again")


def test_a_waiting_pop_is_woken_by_a_queued_request_and_holds_no_connection(
    native_service: NativeService,
    native_url: str,
    native_client: httpx.Client,
    requester: MadeUser,
    owner: MadeUser,
    hub: Any,
) -> None:
    assert hub.subscribed.is_set(), "the process subscribes to the wake channel at startup"
    context = native_service.context
    pools = [context.engine.pool, context.autocommit.pool]  # transactions', autocommit's
    wakes = hub.wakes
    waiting = WaitingPop(native_url, owner.api_key, POP_MAX_WAIT_SECONDS)
    until(lambda: hub.waiting == 1, "the pop to wait")
    # While it waits: no database connection checked out, no transaction open anywhere.
    assert [pool.checkedout() for pool in pools] == [0, 0]  # type: ignore[attr-defined]
    with native_service.context.engine.connect() as conn:
        in_transaction = conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()"
            )
        ).scalar_one()
    assert in_transaction == 0
    request_id = submit_text(native_client, requester.api_key)
    answer = waiting.answer()
    assert answer.status_code == 200, answer.text
    job = answer.json()
    assert job["id"] is not None
    assert job["payload"]["prompt"] == "Once upon a time"
    status = native_client.get(f"/generate/text/status/{request_id}").json()
    assert status["processing"] == 1
    # the pop was woken in-process first: the published wake arrives on its own time
    until(lambda: hub.wakes > wakes, "the submit's published wake to arrive")
    assert hub.waiting == 0
    assert not hub.waiters


def test_a_waiting_pop_answers_the_empty_pop_at_its_deadline(
    native_url: str,
    native_client: httpx.Client,
    requester: MadeUser,
    owner: MadeUser,
    hub: Any,
) -> None:
    # a request this worker turns away (it asks for another model): the empty pop counts it
    other = {"prompt": "Once upon a time", "params": {"max_length": 80}, "models": ["other-7B"]}
    queued = native_client.post(
        "/generate/text/async", headers={"apikey": requester.api_key}, json=other
    )
    assert queued.status_code == 202, queued.text
    empty = native_client.post(
        "/generate/text/pop", headers={"apikey": owner.api_key}, json=POP_BODY
    )
    assert empty.status_code == 200
    assert empty.json()["id"] is None
    assert empty.json()["skipped"] == {"models": 1}
    # the long poll skips the count while it goes on waiting, and answers with it at the end
    waited = WaitingPop(native_url, owner.api_key, 0.5).answer()
    assert waited.status_code == 200
    assert waited.json() == empty.json()
    assert hub.waiting == 0
    assert not hub.waiters


def test_a_woken_pop_that_finds_nothing_waits_again(
    native_service: NativeService,
    native_url: str,
    native_client: httpx.Client,
    requester: MadeUser,
    owner: MadeUser,
    hub: Any,
) -> None:
    waiting = WaitingPop(native_url, owner.api_key, POP_MAX_WAIT_SECONDS)
    until(lambda: hub.waiting == 1, "the pop to wait")
    wake_with_nothing_queued(native_service, hub)
    assert waiting.response is None
    submit_text(native_client, requester.api_key)
    assert waiting.answer().json()["id"] is not None


def test_a_woken_pop_runs_on_the_body_its_first_run_checked(
    native_service: NativeService,
    native_url: str,
    native_client: httpx.Client,
    requester: MadeUser,
    owner: MadeUser,
    hub: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each run of a waiting pop used to parse and check its headers and body again; the
    # woken runs now take the first run's, and still pop with what the worker declared.
    checked: list[bytes] = []
    parse_and_check = worker_views._checked

    def counting(req: Any) -> dict[str, Any]:
        checked.append(req.data())
        return parse_and_check(req)

    monkeypatch.setattr(worker_views, "_checked", counting)
    waiting = WaitingPop(native_url, owner.api_key, POP_MAX_WAIT_SECONDS)
    until(lambda: hub.waiting == 1, "the pop to wait")
    for _ in range(2):  # woken with nothing to take: it waits again
        wake_with_nothing_queued(native_service, hub)
    submit_text(native_client, requester.api_key)
    job = waiting.answer().json()
    assert job["id"] is not None
    assert job["model"] == POP_BODY["models"][0]
    assert len(checked) == 1, "the woken runs parsed the body again"
    assert json.loads(checked[0])["name"] == POP_BODY["name"]


def test_a_wait_above_the_spec_maximum_is_refused(
    native_client: httpx.Client, owner: MadeUser
) -> None:
    body = {**POP_BODY, "wait": POP_MAX_WAIT_SECONDS + 1}
    refused = native_client.post("/generate/text/pop", headers={"apikey": owner.api_key}, json=body)
    assert refused.status_code == 400, refused.text
    assert refused.json()["rc"] == "InvalidPayload"
    assert "wait" in refused.json()["message"]
    negative = {**POP_BODY, "wait": -1}
    refused = native_client.post(
        "/generate/text/pop", headers={"apikey": owner.api_key}, json=negative
    )
    assert refused.status_code == 400, refused.text


def test_a_waiting_pop_counts_once_against_the_pop_limit(
    native_service: NativeService,
    native_url: str,
    native_client: httpx.Client,
    requester: MadeUser,
    owner: MadeUser,
    hub: Any,
) -> None:
    # Two pops a minute, so the third is refused: the waiting pop, woken three times with
    # nothing to take and once with a job, must have used one of the two.
    forget_rate_limit_counts(native_service)
    with route_limits(native_service, "text_pop", RateLimit("2 per minute", KEY_PEER)):
        waiting = WaitingPop(native_url, owner.api_key, POP_MAX_WAIT_SECONDS)
        until(lambda: hub.waiting == 1, "the pop to wait")
        for _ in range(3):
            wake_with_nothing_queued(native_service, hub)
        submit_text(native_client, requester.api_key)
        answer = waiting.answer()
        assert answer.status_code == 200, answer.text
        assert answer.json()["id"] is not None
        second = native_client.post(
            "/generate/text/pop", headers={"apikey": owner.api_key}, json=POP_BODY
        )
        assert second.status_code == 200, second.text
        third = native_client.post(
            "/generate/text/pop", headers={"apikey": owner.api_key}, json=POP_BODY
        )
        assert third.status_code == 429, third.text
    forget_rate_limit_counts(native_service)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.fixture
def own_native(
    horde_stores: EmbeddedStores, native_service: NativeService
) -> Iterator[NativeService]:
    """A native API of its own (stopped by the test), the pop limit raised: 1,000 pops at
    once from one address are 17 times the shipped 60 a second."""
    policy = Policy(rate_limits=raised(RATE_LIMITS, "text_pop"))
    with running_native_with_objects(horde_stores, "horde-long-poll-", policy) as service:
        yield service


WAITERS = 1000
USERS = 25
"""Worker owners of the 1,000 pops, three worker names each (an untrusted user's limit):
pops of one worker name take turns on its row, so 75 names keep the first pops moving."""


async def raw_pop(service: NativeService, api_key: str, body: dict[str, Any]) -> tuple[int, Any]:
    """One pop on a connection of its own, in a few lines of HTTP/1.1 (a thousand of
    httpx's pooled connections cost the test's loop more than the server's work)."""
    payload = json.dumps(body).encode()
    reader, writer = await asyncio.open_connection(service.host, service.port)
    head = (
        f"POST /api/v2/generate/text/pop HTTP/1.1\r\nHost: {service.host}\r\n"
        f"apikey: {api_key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode() + payload)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    _headers, _, content = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(content)


def test_one_process_holds_a_thousand_waiting_pops_on_bounded_threads(
    own_native: NativeService, make_user: Callable[..., MadeUser]
) -> None:
    hub = own_native.app.hub
    workers: list[tuple[str, dict[str, Any]]] = []
    with httpx.Client(base_url=f"{own_native.url}/api/v2", timeout=CLIENT_TIMEOUT) as client:
        for u in range(USERS):
            key = make_user(f"owner-{u}").api_key
            for w in range(3):
                body = {**POP_BODY, "name": f"poller-{u}-{w}"}
                registered = client.post("/generate/text/pop", headers={"apikey": key}, json=body)
                assert registered.status_code == 200, registered.text
                workers.append((key, body))
    threads_before = _threads()
    peak = {"threads": 0}

    async def main() -> list[tuple[int, dict[str, Any]]]:
        pops = []
        for i in range(WAITERS):
            key, body = workers[i % len(workers)]
            payload = {**body, "wait": POP_MAX_WAIT_SECONDS}
            pops.append(asyncio.create_task(raw_pop(own_native, key, payload)))
        started = time.monotonic()
        while hub.waiting < WAITERS:
            assert not any(p.done() for p in pops), (
                f"a pop answered before all were waiting ({hub.waiting} waiting after "
                f"{time.monotonic() - started:.1f} s)"
            )
            peak["threads"] = max(peak["threads"], _threads())
            await asyncio.sleep(0.05)
        peak["threads"] = max(peak["threads"], _threads())
        print(f"{WAITERS} pops waiting after {time.monotonic() - started:.1f} s")
        # Every pop waits: stopping the service answers them all "no job" at once.
        await asyncio.to_thread(own_native.stop)
        return await asyncio.gather(*pops)

    answers = asyncio.run(main())
    assert len(answers) == WAITERS
    assert all(status == 200 for status, _body in answers)
    assert all(body["id"] is None for _status, body in answers)
    # New threads: the service's Flask pools (the workers' lane the pops run on, and the
    # clients' THREADS), its uvicorn thread and this loop's small default executor; none per
    # waiting pop.
    assert peak["threads"] - threads_before <= WORKER_LANE_THREADS + THREADS + 20, peak


def test_a_chunked_body_is_capped_as_a_declared_one_and_a_chunked_pop_waits(
    native_service: NativeService,
    native_url: str,
    native_client: httpx.Client,
    requester: MadeUser,
    owner: MadeUser,
) -> None:
    """uvicorn hands a chunked body on without a length; the shell reads it up to the cap
    (as waitress did), so Flask still refuses a longer one 413 in the native envelope."""
    cap = native_service.context.settings.max_body_bytes or DEFAULT_MAX_BODY_BYTES
    over = b'{"prompt": "' + b"x" * cap + b'"}'

    def chunks(body: bytes) -> Iterator[bytes]:
        yield from (body[i : i + 65536] for i in range(0, len(body), 65536))

    refused = native_client.post(
        "/generate/text/async",
        content=chunks(over),
        headers={"apikey": requester.api_key, "content-type": "application/json"},
    )
    assert refused.status_code == 413, refused.text
    assert refused.json()["rc"] == "PayloadTooLarge"
    empty = native_client.post(
        "/generate/text/pop", headers={"apikey": owner.api_key}, json=POP_BODY
    ).json()
    body = json.dumps({**POP_BODY, "wait": 0.5}).encode()
    waited = native_client.post(
        "/generate/text/pop",
        content=chunks(body),
        headers={"apikey": owner.api_key, "content-type": "application/json"},
    )
    assert waited.status_code == 200, waited.text
    assert waited.json() == empty


def test_the_worker_long_polls_so_a_new_request_reaches_it_by_a_wake(
    native_service: NativeService,
    native_client: httpx.Client,
    requester: MadeUser,
    owner: MadeUser,
    hub: Any,
) -> None:
    """The project's worker at its shipped settings asks for the spec's longest wait: a chat
    request queued while its pop waits is served long before that pop's deadline."""
    from runtime.worker.cli import RunningWorker
    from runtime.worker.config import WorkerConfig
    from tests.doubles.backend_script import Reply
    from tests.doubles.openai_backend import OpenAIBackendDouble
    from tests.integration.chat_flow import chat_async

    backend = OpenAIBackendDouble(default_reply=Reply(content="hello")).start()
    worker = RunningWorker.start(
        WorkerConfig(native_service.url, owner.api_key, backend.openai_base_url, context=4096)
    )
    try:
        assert worker.loop.config.pop_wait == POP_MAX_WAIT_SECONDS
        until(lambda: hub.waiting == 1, "the worker's pop to wait")
        wakes = hub.wakes
        body = {"model": backend.model, "messages": [{"role": "user", "content": "hi"}]}
        response = chat_async(native_client, requester.api_key, body)
        assert response.status_code == 202, response.text
        until(lambda: worker.loop.served == 1, "the worker to serve the request")
        until(lambda: hub.wakes > wakes, "the submit's published wake to arrive")
        until(lambda: hub.waiting == 1, "the worker's next pop to wait")
    finally:
        faulted = worker.stop(grace=5)  # its waiting pop holds no job: nothing to wait for
        backend.close()
    assert faulted == []


def _metric(url: str, name: str) -> float:
    scraped = httpx.get(url + "/metrics", timeout=CLIENT_TIMEOUT).text
    for family in text_string_to_metric_families(scraped):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    return 0.0


PROCESS_POPS = 4


def test_on_two_processes_every_waiting_pop_is_woken_and_sigterm_answers_them(
    horde_stores: EmbeddedStores,
    make_user: Callable[..., MadeUser],
    requester: MadeUser,
    tmp_path: Path,
) -> None:
    """``horde-chat native --processes 2``: pops on fresh connections (the kernel spreads
    them over both processes) are each woken by a submit, whichever process took it (a
    process that missed the wakes would answer only at the deadline, past this client's
    timeout); then SIGTERM to the supervisor answers the pops still waiting at once, with the
    empty pop, and it exits 0."""
    from tests.integration.test_service_commands import Running, command_env

    env = command_env(
        tmp_path,
        HORDE_DATABASE_URL=horde_stores.database_url,
        HORDE_REDIS_URL=horde_stores.redis_url,
        # The test queues 4 text requests from one address at once: 2 a second is shipped.
        HORDE_RATE_LIMIT_SCALE="10",
    )
    native = Running(
        ["native", "--port", "0", "--processes", "2"],
        env,
        r"native API: (http://127\.0\.0\.1:\d+)/api/v2",
    )
    try:
        assert httpx.get(native.url + "/readyz", timeout=120).status_code == 200
        url = native.url + "/api/v2"
        owners = [make_user(f"process-owner-{i}") for i in range(2)]
        pops = [
            WaitingPop(url, owners[i % 2].api_key, POP_MAX_WAIT_SECONDS, name=f"proc-{i}")
            for i in range(PROCESS_POPS)
        ]
        until(lambda: _metric(native.url, "horde_pops_waiting") == PROCESS_POPS, "every pop")
        with httpx.Client(base_url=url, timeout=CLIENT_TIMEOUT) as client:
            for _ in range(PROCESS_POPS):
                submit_text(client, requester.api_key)
        assert all(pop.answer().json()["id"] is not None for pop in pops)
        late = [
            WaitingPop(url, owners[i % 2].api_key, POP_MAX_WAIT_SECONDS, name=f"proc-{i}")
            for i in range(PROCESS_POPS)
        ]
        until(lambda: _metric(native.url, "horde_pops_waiting") == PROCESS_POPS, "every pop")
        assert native.stop() == 0
        answers = [pop.answer() for pop in late]
        assert all(a.status_code == 200 for a in answers)
        assert all(a.json()["id"] is None for a in answers)
    finally:
        if native.process.poll() is None:
            native.stop()
    assert "Traceback" not in "".join(native.stderr)


def test_a_job_the_sweep_aborts_wakes_a_waiting_pop(
    native_service: NativeService,
    native_url: str,
    native_client: httpx.Client,
    requester: MadeUser,
    make_user: Callable[..., MadeUser],
    hub: Any,
) -> None:
    """A requeued job is work too: the sweep that aborts a stale job wakes the waiting pops,
    and one takes the job again."""
    first, second = make_user("first-owner"), make_user("second-owner")
    submit_text(native_client, requester.api_key)
    popped = native_client.post(
        "/generate/text/pop", headers={"apikey": first.api_key}, json=POP_BODY
    ).json()
    assert popped["id"] is not None
    waiting = WaitingPop(native_url, second.api_key, POP_MAX_WAIT_SECONDS, name="second")
    until(lambda: hub.waiting == 1, "the second pop to wait")
    wakes = hub.wakes
    ctx = native_service.context
    later = utcnow() + timedelta(seconds=popped["ttl"] + 1)
    assert sweep(ctx.sessions, ctx.policy, now=later, redis=ctx.redis).aborted == 1
    again = waiting.answer().json()
    assert again["id"] is not None
    assert again["id"] != popped["id"]  # a new job of the same request
    assert again["payload"]["prompt"] == popped["payload"]["prompt"]
    until(lambda: hub.wakes > wakes, "the sweep's published wake to arrive")


def test_a_wake_for_another_model_passes_a_waiting_pop_by(
    native_url: str,
    native_client: httpx.Client,
    requester: MadeUser,
    owner: MadeUser,
    hub: Any,
) -> None:
    """The wake names the queued request's models: a pop whose worker serves none of them
    is not run again (1,000 idle workers of other models cost nothing), one that does is."""
    repops = hub.repops
    waiting = WaitingPop(native_url, owner.api_key, POP_MAX_WAIT_SECONDS)
    until(lambda: hub.waiting == 1, "the pop to wait")
    wakes = hub.wakes
    queue_text(native_client, requester, ["another-model"])
    until(lambda: hub.wakes == wakes + 1, "the other model's wake")
    queue_text(native_client, requester, POP_BODY["models"])
    assert waiting.answer().json()["model"] == POP_BODY["models"][0]
    assert hub.repops == repops + 1  # run again for its own model's wake only


def test_uvicorn_keeps_the_peer_as_the_client_address(
    native_service: NativeService,
    native_client: httpx.Client,
    requester: MadeUser,
) -> None:
    """uvicorn runs with proxy_headers off: a caller without the service passkey cannot set
    its address with X-Forwarded-For (the app trusts it only from a passkey holder)."""
    from runtime.native.db.tables import WaitingPrompt
    from runtime.native.server import uvicorn_config

    assert uvicorn_config("runtime.native.asgi:app_from_env").proxy_headers is False
    body = {"prompt": "Once upon a time", "params": {"max_length": 80}}
    queued = native_client.post(
        "/generate/text/async",
        headers={"apikey": requester.api_key, "X-Forwarded-For": "203.0.113.7"},
        json=body,
    )
    assert queued.status_code == 202, queued.text
    with native_service.context.sessions() as session:
        row = session.get(WaitingPrompt, queued.json()["id"])
        assert row is not None
        assert row.ipaddr == "127.0.0.1"


def test_a_request_queued_in_this_process_wakes_its_waiting_pop_without_redis(
    native_url: str,
    native_client: httpx.Client,
    requester: MadeUser,
    owner: MadeUser,
    hub: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A submit wakes its own process's waiting pops directly (``queue.wake.wake_here``:
    Redis's delivery back to this process was ~0.5-1.5 ms of a dispatch). Here every
    wake from Redis names a model no worker serves, so only the direct wake can run the pop
    again before its deadline, which is past this client's timeout."""
    monkeypatch.setattr(asgi, "wake_models", lambda data: frozenset({"no-such-model"}))
    waiting = WaitingPop(native_url, owner.api_key, POP_MAX_WAIT_SECONDS)
    until(lambda: hub.waiting == 1, "the pop to wait")
    wakes = hub.wakes
    submit_text(native_client, requester.api_key)
    answer = waiting.answer()
    assert answer.status_code == 200, answer.text
    assert answer.json()["id"] is not None
    until(lambda: hub.wakes == wakes + 1, "the published wake to arrive as well")


def retried_pops_threads(
    native_service: NativeService, monkeypatch: pytest.MonkeyPatch
) -> list[int]:
    """The threads the pop view runs on for waiting pops woken (filled as they run)."""
    lane = native_service.app.lane
    threads: list[int] = []
    view = lane.views["text_pop"]

    def recorded(req: Any) -> Any:
        if req.attempt is not None and req.attempt.retry:
            threads.append(threading.get_ident())
        return view(req)

    monkeypatch.setitem(lane.views, "text_pop", recorded)
    return threads


def test_a_request_queued_in_this_process_runs_a_waiting_pop_on_the_queuing_thread(
    native_service: NativeService,
    native_url: str,
    native_client: httpx.Client,
    requester: MadeUser,
    owner: MadeUser,
    hub: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The view that queued a request for a waiting pop's model runs that pop itself, right
    after its commit (``asgi.InPlacePop``): no hop through the event loop to a lane thread,
    and no run beside the view's own tail. The loop only sends the pop's answer."""
    ran_on = retried_pops_threads(native_service, monkeypatch)
    woke_from: list[int] = []
    wake_local = wake.wake_local

    def recorded_wake(*args: Any) -> list[str]:
        woke_from.append(threading.get_ident())
        return wake_local(*args)

    monkeypatch.setattr(wake, "wake_local", recorded_wake)
    waiting = WaitingPop(native_url, owner.api_key, POP_MAX_WAIT_SECONDS)
    until(lambda: hub.waiting == 1, "the pop to wait")
    queue_text(native_client, requester, POP_BODY["models"])
    answer = waiting.answer()
    assert answer.status_code == 200, answer.text
    assert answer.json()["id"] is not None
    assert len(woke_from) == 1
    assert ran_on == woke_from  # one run after the wait, on the thread that queued the job


def test_a_pop_run_in_place_that_finds_nothing_waits_again(
    native_service: NativeService,
    native_url: str,
    native_client: httpx.Client,
    requester: MadeUser,
    owner: MadeUser,
    hub: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pop run by a waking thread that finds no job (another worker took it first) is not
    answered: it waits again, not run once more for the same wake, and the next request
    for its model reaches it."""
    ran_on = retried_pops_threads(native_service, monkeypatch)
    waiting = WaitingPop(native_url, owner.api_key, POP_MAX_WAIT_SECONDS)
    until(lambda: hub.waiting == 1, "the pop to wait")
    repops = hub.repops
    hub.wake_threadsafe(frozenset(POP_BODY["models"]))  # nothing queued: runs it here
    assert ran_on == [threading.get_ident()]
    until(lambda: hub.repops == repops + 1 and hub.waiting == 1, "the pop to wait again")
    assert waiting.response is None
    queue_text(native_client, requester, POP_BODY["models"])
    answer = waiting.answer()
    assert answer.status_code == 200, answer.text
    assert answer.json()["id"] is not None
    assert hub.repops == repops + 2
