"""The embedded Redis killed (SIGKILL: everything since its last snapshot is lost) while
requests wait at the front, plain and streamed, then started again on the same socket.
The native API, the front and a test worker run in-process on the
suite's stores; the worker is paused while Redis is down, so every request is still waiting
when Redis goes and comes back, and it serves them all after.

Every wait must complete or end with a clean error in OpenAI's envelope (never a 500, never
past the test's bound), nothing is charged twice, and a request whose client got an error
is not charged.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from runtime.stores.embedded_redis import EmbeddedRedis
from tests.conftest import MadeUser
from tests.faults.support import (
    MESSAGES,
    MODEL,
    Streamed,
    charge_entries,
    chat_rows,
    read_stream,
)
from tests.support.chat_worker import ChatTestWorker
from tests.support.waiting import until

pytestmark = [pytest.mark.faults, pytest.mark.integration]

PLAIN, STREAMED = 3, 2
OUTAGE_SECONDS = 3.0  # long enough for every wait to meet the outage (XREAD, signals, status)
BOUND = 120.0  # seconds a client may wait in all: the fallback poll (10 s) and then some


def restart_redis(stores: EmbeddedStores) -> None:
    """SIGKILL the suite's redis-server, wait OUTAGE_SECONDS, start it on the same folder."""
    down = stores.redis
    assert down is not None
    assert down.process is not None
    down.process.kill()
    down.process.wait(10)
    down.process = None
    threading.Event().wait(OUTAGE_SECONDS)
    up = EmbeddedRedis.start(down.data_dir)
    assert up.url == stores.redis_url  # the same socket: the services reconnect to it
    stores.redis = up


def test_waits_and_streams_outlive_a_redis_restart_and_nothing_is_charged_twice(
    fault_stores: EmbeddedStores,
    fault_native: NativeService,
    front_url: str,
    users: tuple[MadeUser, MadeUser],
) -> None:
    requester, owner = users
    native_url = f"{fault_native.url}/api/v2"
    answers: list[tuple[int, Any]] = []
    streams: list[Streamed] = []
    headers = {"Authorization": f"Bearer {requester.api_key}"}
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 50}
    with (
        ChatTestWorker(native_url, owner.api_key, model=MODEL) as worker,
        httpx.Client(base_url=front_url, headers=headers, timeout=BOUND) as client,
    ):
        worker.pause()

        def plain() -> None:
            got = client.post("/v1/chat/completions", json=body)
            answers.append((got.status_code, got.json()))

        def streamed() -> None:
            streams.append(read_stream(client, body))

        clients = [threading.Thread(target=plain) for _ in range(PLAIN)]
        clients += [threading.Thread(target=streamed) for _ in range(STREAMED)]
        for thread in clients:
            thread.start()
            threading.Event().wait(0.6)  # the native submit limit: 2 a second per client
        sessions = fault_native.context.sessions
        until(lambda: len(chat_rows(sessions)) == PLAIN + STREAMED, "every request queued")
        restart_redis(fault_stores)
        worker.resume()
        for thread in clients:
            thread.join(BOUND)
    assert not any(thread.is_alive() for thread in clients), "a wait outlived its bound"
    errors = [reply for status, reply in answers if status != 200]
    errors += [{"error": error} for seen in streams for error in seen.errors]
    errors += [{"status": seen.status, "body": seen.body} for seen in streams if seen.status != 200]
    assert all(seen.done for seen in streams if seen.status == 200)
    served = [reply for status, reply in answers if status == 200]
    served_streams = [seen for seen in streams if seen.status == 200 and not seen.errors]
    charged = charge_entries(sessions, requester.id)
    assert all(count == 1 for count in charged.values()), charged
    # every request completed: the horde served and charged each one once
    assert (errors, len(served) + len(served_streams)) == ([], PLAIN + STREAMED)
    assert len(charged) == PLAIN + STREAMED
