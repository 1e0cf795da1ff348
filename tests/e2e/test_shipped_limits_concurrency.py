"""Concurrency at the shipped rate limits: clients of the front wait as long as
their replies take, and the front's reads never spend their budgets.

The live front, the live native API at its shipped limits (spec/rate_limits.yaml) and the
real chat worker serving from the OpenAI backend double, which holds every reply 3 s. One
client sends 20 requests 0.6 s apart (under its 2 a second submit limit) while 100 others
wait, sent at once, two from each of 50 client addresses (127.0.0.2 to 127.0.0.51, each with its
own key; the front forwards each address to the native API). If the front's
status reads of every client counted against one 60 a minute budget of the front's own
address, a 429 on a read would end the wait. Every request must be answered, none refused
after submission (x-should-retry false), and each charged once (the ledger in Postgres).
A submission's 429 comes before anything is queued, so the SDK retries it (RETRIES): 100
submissions at once hold the front's native calls long enough to bunch up one client's
requests sent 0.6 s apart; the paced client starts once the crowd is queued.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from runtime.native.db.tables import KudosLedger, WaitingPrompt
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from runtime.worker.cli import RunningWorker
from runtime.worker.config import WorkerConfig
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.doubles.backend_script import Reply
from tests.doubles.openai_backend import OpenAIBackendDouble
from tests.support.front import running_front
from tests.support.workers import until_listed

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]


MODEL = "concurrency-model"
MESSAGES: list[Any] = [{"role": "user", "content": "Hello"}]
HELD = 3.0
"""Seconds the backend holds every reply."""
PACED = 20
PACE = 0.6
"""One client's requests, this many seconds apart: under its 2 a second submit limit."""
ADDRESSES = [f"127.0.0.{i}" for i in range(2, 52)]
PER_ADDRESS = 2
THREADS = 24
"""The worker's jobs at a time: 120 jobs of 3 s in about 15 s; idle, its threads pop 48
times a second, under the shipped 60 a second."""
FRONT = {"deadline": 120.0, "grace": 60.0, "poll_interval": 2.0, "queue_info_wait": 0.5}
CHARGE = "charge"
TOO_MANY = 429
RETRIES = 6
"""A client that honours a submission's 429 (Retry-After) a few times: on 2 cores running
the whole stack, requests sent 0.6 s apart can reach the native API bunched together."""
AFTER_SUBMISSION = "false"
"""The x-should-retry of an error once the Horde may hold the request."""


@pytest.fixture
def backend() -> Iterator[OpenAIBackendDouble]:
    with OpenAIBackendDouble(model=MODEL, default_reply=Reply(content="OK")) as double:
        yield double


@pytest.fixture
def worker(
    native_service: NativeService,
    native_db: Any,
    owner: MadeUser,
    backend: OpenAIBackendDouble,
) -> Iterator[RunningWorker]:
    config = WorkerConfig(
        native_service.url,
        owner.api_key,
        backend.openai_base_url,
        name="concurrency-worker",
        context=8192,
        chat_only=True,
        threads=THREADS,
        poll_interval=0.5,
    )
    running = RunningWorker.start(config)
    backend.default_reply = Reply(content="OK", delay=HELD)  # after the startup probes
    try:
        with httpx.Client(base_url=f"{native_service.url}/api/v2", timeout=30) as native:
            until_listed(native)
        yield running
    finally:
        running.stop(grace=10)


@pytest.fixture
def front_url(horde_stores: EmbeddedStores, native_service: NativeService) -> Iterator[str]:
    with running_front(
        horde_stores.redis_url, [native_service.url], service_passkey=SERVICE_PASSKEY, **FRONT
    ) as front:
        yield front.url


async def ask(front_url: str, api_key: str, address: str, refusals: list[str | None]) -> Any:
    """One request from ``address`` (RETRIES after a 429); its completion, or the error
    it got. ``refusals`` gets the x-should-retry header of every 429 the client saw."""

    async def note(response: httpx.Response) -> None:
        if response.status_code == TOO_MANY:
            refusals.append(response.headers.get("x-should-retry"))

    transport = httpx.AsyncHTTPTransport(local_address=address)
    async with (
        httpx.AsyncClient(
            transport=transport, timeout=150, event_hooks={"response": [note]}
        ) as http,
        openai.AsyncOpenAI(
            base_url=front_url + "/v1", api_key=api_key, max_retries=RETRIES, http_client=http
        ) as sdk,
    ):
        try:
            return await sdk.chat.completions.create(model=MODEL, messages=MESSAGES)
        except openai.APIStatusError as error:
            return error


async def everyone(
    front_url: str,
    paced_key: str,
    keys: list[str],
    sessions: sessionmaker[Session],
    refusals: list[str | None],
) -> list[Any]:
    crowd = [
        asyncio.create_task(ask(front_url, key, address, refusals))
        for key, address in zip(keys, ADDRESSES, strict=True)
        for _ in range(PER_ADDRESS)
    ]
    await asyncio.to_thread(until_queued, sessions, len(crowd))
    paced = []
    for _ in range(PACED):
        paced.append(asyncio.create_task(ask(front_url, paced_key, "127.0.0.1", refusals)))
        await asyncio.sleep(PACE)
    return list(await asyncio.gather(*crowd, *paced))


def until_queued(sessions: sessionmaker[Session], count: int) -> None:
    """Until ``count`` requests were queued (the crowd is waiting)."""
    pause = threading.Event()
    for _ in range(600):
        with sessions() as session:
            if len(session.scalars(select(WaitingPrompt.id)).all()) >= count:
                return
        pause.wait(0.1)
    raise AssertionError(f"{count} requests were not queued within a minute")


def charges(sessions: sessionmaker[Session]) -> Counter[tuple[int, Any]]:
    """(user, request) -> charge rows."""
    with sessions() as session:
        rows = session.execute(
            select(KudosLedger.user_id, KudosLedger.wp_id).where(KudosLedger.reason == CHARGE)
        ).all()
    return Counter((user, wp) for user, wp in rows)


def test_every_wait_is_answered_at_the_shipped_limits_and_charged_once(
    worker: RunningWorker,
    front_url: str,
    native_db: sessionmaker[Session],
    requester: MadeUser,
    make_user: Any,
) -> None:
    clients = [make_user(f"client-{i}", kudos=1000) for i in range(len(ADDRESSES))]
    keys = [c.api_key for c in clients]
    refusals: list[str | None] = []
    results = asyncio.run(everyone(front_url, requester.api_key, keys, native_db, refusals))
    errors = [r for r in results if isinstance(r, openai.APIStatusError)]
    assert not errors, [(e.status_code, e.message) for e in errors]
    assert AFTER_SUBMISSION not in refusals  # a 429 only ever before anything was queued
    assert [r.choices[0].message.content for r in results] == ["OK"] * len(results)
    total = PACED + PER_ADDRESS * len(ADDRESSES)
    with native_db() as session:
        requests = session.execute(select(WaitingPrompt.id, WaitingPrompt.user_id)).all()
        addresses = set(session.scalars(select(WaitingPrompt.ipaddr)))
    assert len(requests) == total
    assert addresses == {"127.0.0.1", *ADDRESSES}
    charged = charges(native_db)
    assert set(charged) == {(user, wp) for wp, user in requests}
    assert set(charged.values()) == {1}
    per_user = Counter(user for user, _ in charged)
    assert per_user[requester.id] == PACED
    assert all(per_user[c.id] == PER_ADDRESS for c in clients)
