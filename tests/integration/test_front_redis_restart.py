"""The lean front and its Redis: a plain request costs the front no status read, a request
that ended before the front subscribed is found under its outcome key, and a Redis restart
(the embedded redis-server stopped and started again on the same socket, with a wait and a
stream open) fails neither: the signal hub reconnects and resubscribes, the progress relay
reads on from where it was, and the client gets the whole reply, charged once.

Each test runs its own native API and front on its own Redis (the session's Redis stays up
for every other test); Postgres is the session's, emptied by ``native_db``. The front runs
at the shipped settings except where a test says why.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import redis
from redis.asyncio import Redis as AsyncRedis
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from generated.errors import NoWorkerSupportsFeatures
from generated.signals import CHAT_SIGNALS
from generated.wire.native import ChatStatus
from runtime.front.native_client import NativeClient, native_session
from runtime.front.signals import SignalHub
from runtime.front.waiter import ReplyWait, WaitBudget
from runtime.native.db.tables import WaitingPrompt
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from runtime.stores.embedded_redis import EmbeddedRedis
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.integration.native_flow import ledger
from tests.support.chat_worker import ChatTestWorker, Respond
from tests.support.dropping_proxy import DroppingProxy
from tests.support.front import open_waits, running_front
from tests.support.native import running_native_with_objects
from tests.support.redis_commands import command_calls
from tests.support.stores import running_redis
from tests.support.waiting import until

pytestmark = pytest.mark.integration

MODEL = "redis-restart-model"
MESSAGES = [{"role": "user", "content": "Say hello"}]
STATUS = b"GET /api/v2/generate/chat/status/"
CLIENT_TIMEOUT = 30.0
"""The client's patience, well under LONG_POLL: a reply that came only from the fallback
poll (a signal path that did not recover) fails the test by timing out."""
LONG_POLL = 120.0


@pytest.fixture
def own_redis() -> Iterator[EmbeddedRedis]:
    with running_redis("horde-restart-redis-") as server:
        yield server


@pytest.fixture
def own_native(
    horde_stores: EmbeddedStores, own_redis: EmbeddedRedis, native_db: sessionmaker[Session]
) -> Iterator[NativeService]:
    stores = EmbeddedStores(database_url=horde_stores.database_url, redis_url=own_redis.url)
    with running_native_with_objects(
        stores, "horde-restart-objects-", service_passkey=SERVICE_PASSKEY
    ) as service:
        yield service


@pytest.fixture
def proxy(own_native: NativeService) -> Iterator[DroppingProxy]:
    with DroppingProxy(own_native.port) as recording:
        yield recording


def restart(server: EmbeddedRedis) -> EmbeddedRedis:
    """Stop the redis-server (it saves) and start it again on the same socket."""
    server.stop()
    threading.Event().wait(1.0)  # the services meet the closed socket meanwhile
    again = EmbeddedRedis.start(server.data_dir)
    assert again.url == server.url
    server.process = again.process  # the fixture stops the new one
    return again


def listening(server: EmbeddedRedis) -> bool:
    """The front's signal hub holds its pattern subscription (its only one)."""
    client = redis.Redis.from_url(server.url)
    try:
        return int(client.pubsub_numpat()) == 1
    except redis.RedisError:
        return False
    finally:
        client.close()


def subscriptions(server: EmbeddedRedis) -> dict[str, int]:
    """How many (un)subscribe commands of any kind, and GETs, Redis has run."""
    client = redis.Redis.from_url(server.url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return command_calls(stats, "subscribe", "unsubscribe", "psubscribe", "punsubscribe", "get")


def chat_rows(sessions: sessionmaker[Session]) -> list[WaitingPrompt]:
    with sessions() as session:
        return list(session.scalars(select(WaitingPrompt).where(WaitingPrompt.is_chat)).all())


def test_a_plain_request_costs_the_front_no_status_read(
    own_native: NativeService,
    own_redis: EmbeddedRedis,
    proxy: DroppingProxy,
    owner: MadeUser,
    requester: MadeUser,
    native_db: sessionmaker[Session],
) -> None:
    native_url = f"{own_native.url}/api/v2"
    reply: Respond = lambda job: {"content": "Hello there.", "finish_reason": "stop"}  # noqa: E731
    with (
        running_front(own_redis.url, [proxy.url], service_passkey=SERVICE_PASSKEY) as front,
        ChatTestWorker(native_url, owner.api_key, model=MODEL, respond=reply),
        openai.OpenAI(base_url=front.url + "/v1", api_key=requester.api_key) as sdk,
    ):
        until(lambda: listening(own_redis), "the front's signal hub")
        before = subscriptions(own_redis)
        completion = sdk.chat.completions.create(model=MODEL, messages=MESSAGES)
        # the front's one pattern subscription heard it: the wait sent Redis none of its own
        # and read the outcome key once, the one its event named (no lookup at its opening)
        after = subscriptions(own_redis)
        assert after.pop("get") - before.pop("get") == 1
        assert after == before
    assert completion.choices[0].message.content == "Hello there."
    # the submit's answer held the first status, the signal named the outcome key
    assert proxy.sent(STATUS) == []
    (row,) = chat_rows(native_db)
    stored = redis.Redis.from_url(own_redis.url).get(CHAT_SIGNALS.outcome_key(str(row.id)))
    assert stored is not None
    assert json.loads(stored)["generations"][0]["content"] == "Hello there."


async def _open_wait(
    redis_url: str, native_root: str, request_id: str, first: ChatStatus | None
) -> ReplyWait:
    """A ReplyWait opened on ``request_id`` by a hub and native client of its own."""
    hub = SignalHub(AsyncRedis.from_url(redis_url, decode_responses=True), CHAT_SIGNALS.channel)
    await hub.start()
    try:
        async with native_session() as http:
            native = NativeClient(
                http, (native_root,), passkey=SERVICE_PASSKEY, client_agent="test:0:test"
            )
            budget = WaitBudget(deadline=30, grace=20, poll_interval=10, queue_info_wait=2)
            async with ReplyWait(native, hub, request_id, {}, budget) as wait:
                await wait.open(first)
                return wait
    finally:
        await hub.stop()
        await hub.redis.aclose()


def test_an_ended_request_is_found_under_its_outcome_key_and_a_gap_needs_no_read(
    own_native: NativeService,
    own_redis: EmbeddedRedis,
    proxy: DroppingProxy,
    owner: MadeUser,
    requester: MadeUser,
) -> None:
    native_url = f"{own_native.url}/api/v2"
    reply: Respond = lambda job: {"content": "Done early.", "finish_reason": "stop"}  # noqa: E731
    with ChatTestWorker(native_url, owner.api_key, model=MODEL, respond=reply) as worker:
        accepted = httpx.post(
            native_url + "/generate/chat/async",
            headers={"apikey": requester.api_key},
            json={"model": MODEL, "messages": MESSAGES},
        ).raise_for_status()
        request_id = accepted.json()["id"]
        assert accepted.json()["status"]["done"] is False  # the first status, in the answer
        until(lambda: worker.submits, "the worker's submit")
    # the request ended before any front subscribed: open() finds it under its outcome key
    wait = asyncio.run(_open_wait(own_redis.url, proxy.url, request_id, None))
    assert (wait.reads, wait.outcome_reads) == (0, 1)
    assert wait.status is not None
    assert wait.status["done"]
    assert proxy.sent(STATUS) == []

    # a submit's status with a declaration gap refuses before any status read
    gap = {**accepted.json()["status"], "missing_features": ["tool_choice_enforced"]}
    with pytest.raises(NoWorkerSupportsFeatures):
        asyncio.run(_open_wait(own_redis.url, proxy.url, "no-such-request", gap))
    assert proxy.sent(STATUS) == []


@pytest.mark.parametrize("stream", [False, True])
def test_a_wait_and_a_stream_survive_a_redis_restart(
    own_native: NativeService,
    own_redis: EmbeddedRedis,
    proxy: DroppingProxy,
    owner: MadeUser,
    requester: MadeUser,
    native_db: sessionmaker[Session],
    stream: bool,
) -> None:
    native_url = f"{own_native.url}/api/v2"
    posted, answer = threading.Event(), threading.Event()
    progress = httpx.Client(base_url=native_url, headers={"apikey": owner.api_key}, timeout=30)

    def respond(job: dict[str, Any]) -> dict[str, Any]:
        if job.get("stream"):
            progress.post(
                "/generate/text/progress", json={"id": job["id"], "seq": 0, "delta": "Hello "}
            ).raise_for_status()
        posted.set()
        assert answer.wait(CLIENT_TIMEOUT)
        if job.get("stream"):
            # a lease the restart lost is refused (404): the submitted reply still ends the
            # stream, extending what was relayed
            progress.post(
                "/generate/text/progress", json={"id": job["id"], "seq": 1, "delta": "world"}
            )
        return {"content": "Hello world", "finish_reason": "stop"}

    texts: list[str] = []
    outcome: dict[str, Any] = {}

    def client(front_url: str) -> None:
        body = {"model": MODEL, "messages": MESSAGES, "stream": stream}
        headers = {"Authorization": f"Bearer {requester.api_key}"}
        try:
            with httpx.stream(
                "POST",
                front_url + "/v1/chat/completions",
                json=body,
                headers=headers,
                timeout=CLIENT_TIMEOUT,
            ) as response:
                outcome["status"] = response.status_code
                lines = []
                for line in response.iter_lines():
                    lines.append(line)
                    if line.startswith("data: {"):
                        event = json.loads(line[len("data: ") :])
                        for choice in event.get("choices") or []:
                            texts.append(choice.get("delta", {}).get("content") or "")
                outcome["lines"] = lines
        except Exception as exc:  # noqa: BLE001  # the test asserts there was none
            outcome["error"] = exc

    # poll_interval raised from the shipped 10 s: a reply after the restart can then only
    # have come through the reconnected signal (the client gives up long before a poll)
    with (
        running_front(
            own_redis.url, [proxy.url], service_passkey=SERVICE_PASSKEY, poll_interval=LONG_POLL
        ) as front,
        ChatTestWorker(native_url, owner.api_key, model=MODEL, respond=respond),
        progress,
    ):
        caller = threading.Thread(target=client, args=(front.url,))
        caller.start()
        until(posted.is_set, "the worker holding the job")
        (row,) = chat_rows(native_db)
        until(lambda: open_waits(front.url) == 1, "the front's wait open")
        assert listening(own_redis)
        if stream:
            until(lambda: "".join(texts) == "Hello ", "the first delta relayed")
        restart(own_redis)
        until(lambda: listening(own_redis), "the front's subscription again")
        answer.set()
        caller.join(CLIENT_TIMEOUT + 5)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["status"] == 200
    lines = [line for line in outcome["lines"] if line]
    if stream:
        assert lines[-1] == "data: [DONE]"
        assert [line for line in lines if '"error"' in line] == []
        assert "".join(texts) == "Hello world"
    else:
        assert json.loads(lines[0])["choices"][0]["message"]["content"] == "Hello world"
    charges = [reason for reason, _ in ledger(native_db, requester.id) if reason == "charge"]
    assert charges == ["charge"]
    (row,) = chat_rows(native_db)
    assert not row.cancelled
