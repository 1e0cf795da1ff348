"""A wait never dies of a transient answer: the front against the real native
API at its shipped limits, with the front's service budget on one route lowered to one call
an hour, so every call after the first is refused with 429 until the test forgets the
counters (as the window's end would). The front reaches the native API through a recording
DroppingProxy, so a test reads the calls the native side received.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from sqlalchemy.orm import Session, sessionmaker

from generated.rate_limits import KEY_CLIENT_ROUTE, KEY_KEY_ROUTE
from generated.routes import HEADER_X_HORDE_SERVICE_PASSKEY
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from runtime.tables.rate_limits import RateLimit
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.integration.test_front_waits import (
    MESSAGES,
    MODEL,
    STATUS,
    TRUSTED_ONLY,
    front_on,
    replying,
    rows,
)
from tests.support.chat_worker import ChatTestWorker
from tests.support.dropping_proxy import DroppingProxy, split
from tests.support.native import forget_rate_limit_counts, route_limits
from tests.support.waiting import until

pytestmark = pytest.mark.integration

CANCEL = b"DELETE /api/v2/generate/chat/status/"
ONE_AN_HOUR = "1 per hour"
"""The front's service budget under test: the first call passes, the next are refused."""
WAITS = {"deadline": 30.0}


@pytest.fixture
def proxy(native_service: NativeService, native_db: Any) -> Iterator[DroppingProxy]:
    with DroppingProxy(native_service.port) as recording:
        yield recording


@pytest.fixture
def front_url(horde_stores: EmbeddedStores, proxy: DroppingProxy) -> Iterator[str]:
    with front_on(horde_stores, [proxy.url], **WAITS) as front:
        yield front.url


@pytest.fixture
def sdk(front_url: str, requester: MadeUser) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=front_url + "/v1", api_key=requester.api_key, max_retries=0) as c:
        yield c


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """``call`` running in a thread; the list gets its result or its exception."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:  # noqa: BLE001 - the test asserts on it
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def assert_for_the_client(request: bytes) -> None:
    """A call the front made for the test's client: passkey and the client's address."""
    headers, _ = split(request)
    assert headers[HEADER_X_HORDE_SERVICE_PASSKEY.lower()] == SERVICE_PASSKEY
    assert headers["x-forwarded-for"] == "127.0.0.1"


def test_a_status_read_answered_429_backs_off_and_the_wait_ends_with_the_reply(
    native_service: NativeService,
    native_url: str,
    owner: MadeUser,
    proxy: DroppingProxy,
    sdk: openai.OpenAI,
) -> None:
    budget = RateLimit("60 per minute", KEY_CLIENT_ROUTE, service=ONE_AN_HOUR)
    worker = ChatTestWorker(
        native_url, owner.api_key, model=MODEL, respond=replying(content="Hello there.")
    )
    with route_limits(native_service, "chat_status", budget), worker:
        worker.pause()
        thread, outcome = in_thread(
            lambda: sdk.chat.completions.create(model=MODEL, messages=MESSAGES)
        )
        # the first read passed; the next ones were refused, and the wait goes on
        until(lambda: len(proxy.sent(STATUS)) >= 3, "three status reads")
        assert not outcome, outcome
        worker.resume()
        until(lambda: worker.submits, "the worker's reply")
        forget_rate_limit_counts(native_service)
        thread.join(timeout=30)
    (reply,) = outcome
    assert isinstance(reply, openai.types.chat.ChatCompletion), reply
    assert reply.choices[0].message.content == "Hello there."
    for read in proxy.sent(STATUS):
        assert_for_the_client(read)


def test_a_cancel_answered_429_is_repeated_until_the_native_api_confirms_it(
    native_service: NativeService,
    native_url: str,
    owner: MadeUser,
    proxy: DroppingProxy,
    sdk: openai.OpenAI,
    native_db: sessionmaker[Session],
) -> None:
    budget = RateLimit("60 per minute", KEY_CLIENT_ROUTE, service=ONE_AN_HOUR)
    horde = {**TRUSTED_ONLY["horde"], "availability_mode": "fail_fast"}
    worker = ChatTestWorker(native_url, owner.api_key, model=MODEL)
    with route_limits(native_service, "chat_cancel", budget), worker:
        # another call of the front's spends the budget first
        other = ChatTestWorker(native_url, owner.api_key, model=MODEL)
        try:
            spent = other.client.delete(
                "/generate/chat/status/none",
                headers={HEADER_X_HORDE_SERVICE_PASSKEY: SERVICE_PASSKEY},
            )
        finally:
            other.client.close()
        assert spent.status_code == 404
        with pytest.raises(openai.APIStatusError) as refused:
            sdk.chat.completions.create(model=MODEL, messages=MESSAGES, extra_body={"horde": horde})
        assert refused.value.status_code == 503
        (row,) = rows(native_db)
        assert not row.cancelled
        until(lambda: len(proxy.sent(CANCEL)) >= 2, "a repeated cancel")
        forget_rate_limit_counts(native_service)
        until(lambda: rows(native_db)[0].cancelled, "the confirmed cancel")
    cancels = proxy.sent(CANCEL)
    assert all(c.startswith(CANCEL + str(row.id).encode()) for c in cancels)
    for cancel in cancels:
        assert_for_the_client(cancel)


SUBMIT = b"POST /api/v2/generate/chat/async"


def test_a_submit_refused_by_the_rate_limit_is_held_and_repeated_within_the_patience(
    native_service: NativeService,
    native_url: str,
    owner: MadeUser,
    proxy: DroppingProxy,
    sdk: openai.OpenAI,
) -> None:
    # The submit budget lowered to one in 3 s (the shipped 2 a second is too quick to meet
    # from one thread): the second request is refused by the native API, queued nothing, and
    # the front waits out the limit (its Retry-After) and submits it again instead of
    # answering 429 (the SDK here makes no retries of its own).
    every_3s = RateLimit("1 per 3 seconds", KEY_CLIENT_ROUTE)
    shipped = (
        RateLimit("2 per second", KEY_CLIENT_ROUTE),
        RateLimit("2 per second", KEY_KEY_ROUTE, anonymous="60 per second"),
    )
    worker = ChatTestWorker(native_url, owner.api_key, model=MODEL, respond=replying(content="Hi."))
    with route_limits(native_service, "chat_async", every_3s, *shipped), worker:
        first = sdk.chat.completions.create(model=MODEL, messages=MESSAGES)
        second = sdk.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert first.choices[0].message.content == "Hi."
    assert second.choices[0].message.content == "Hi."
    assert first.id != second.id
    assert len(proxy.sent(SUBMIT)) >= 3  # the second was refused at least once, then repeated


def test_a_submit_still_refused_after_the_patience_is_a_429_before_anything_is_queued(
    horde_stores: EmbeddedStores,
    native_service: NativeService,
    proxy: DroppingProxy,
    requester: MadeUser,
    native_db: sessionmaker[Session],
) -> None:
    # No patience (the shipped 10 s would make the test wait that long for the same outcome).
    once = RateLimit(ONE_AN_HOUR, KEY_CLIENT_ROUTE)
    shipped = (
        RateLimit("2 per second", KEY_CLIENT_ROUTE),
        RateLimit("2 per second", KEY_KEY_ROUTE),
    )
    with (
        route_limits(native_service, "chat_async", once, *shipped),
        front_on(horde_stores, [proxy.url], submit_patience=0.0, **WAITS) as front,
        openai.OpenAI(base_url=front.url + "/v1", api_key=requester.api_key, max_retries=0) as sdk,
    ):
        horde = {**TRUSTED_ONLY["horde"], "availability_mode": "fail_fast"}
        with pytest.raises(openai.APIStatusError):
            sdk.chat.completions.create(model=MODEL, messages=MESSAGES, extra_body={"horde": horde})
        queued = len(rows(native_db))
        with pytest.raises(openai.RateLimitError) as refused:
            sdk.chat.completions.create(model=MODEL, messages=MESSAGES)
        forget_rate_limit_counts(native_service)
    assert refused.value.response.headers.get("x-should-retry") != "false"
    headers = refused.value.response.headers
    assert int(headers["retry-after"]) > 1  # the window's reset
    # and the native API's wait to the millisecond, which OpenAI's SDKs read first
    wait_ms = int(headers["retry-after-ms"])
    assert (int(headers["retry-after"]) - 1) * 1000 < wait_ms <= int(headers["retry-after"]) * 1000
    assert len(rows(native_db)) == queued  # the refused submit queued nothing
