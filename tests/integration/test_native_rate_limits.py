"""The native API's rate limits (spec/rate_limits.yaml) on the live service: what each is
counted on, as upstream keys them, and the chat front's service budget.

Each test lowers the one route's limits it looks at to N per hour (an hour's window cannot
end between a test's calls, as a second's or a minute's could) and keeps every other
route's shipped limits; native_db empties the counters before each test.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import flask
import httpx
import pytest
from flask_limiter import Limiter

from generated.rate_limits import KEY_CLIENT_ROUTE, KEY_KEY_ROUTE
from generated.routes import HEADER_X_HORDE_SERVICE_PASSKEY, ROUTES
from generated.wire import ANONYMOUS_API_KEY, HEADER_FORWARDED_FOR
from runtime.native.api.app import create_app
from runtime.native.server import NativeService
from runtime.tables.rate_limits import RateLimit
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.integration.chat_flow import chat_async, chat_body, chat_pop
from tests.support.native import route_limits

pytestmark = pytest.mark.integration


PASSKEY = {HEADER_X_HORDE_SERVICE_PASSKEY: SERVICE_PASSKEY}
PLENTY = "1000 per hour"


def through_front(address: str) -> dict[str, str]:
    """The headers of the chat front calling for the client at ``address``."""
    return {**PASSKEY, HEADER_FORWARDED_FOR: address}


def text_async(client: httpx.Client, api_key: str, **headers: str) -> httpx.Response:
    return client.post(
        "/generate/text/async", headers={"apikey": api_key, **headers}, json={"prompt": "Hi"}
    )


def codes(responses: list[httpx.Response]) -> list[int]:
    return [r.status_code for r in responses]


def assert_limited(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    assert response.json()["rc"] == "RateLimited"
    assert response.headers["Retry-After"]


def test_status_and_cancel_are_counted_per_request_id_as_upstream_keys_them(
    native_service: NativeService, native_client: httpx.Client, requester: MadeUser
) -> None:
    first, second = (text_async(native_client, requester.api_key).json()["id"] for _ in range(2))
    status = RateLimit("3 per hour", KEY_CLIENT_ROUTE)
    with route_limits(native_service, "text_status", status):
        reads = [native_client.get(f"/generate/text/status/{first}") for _ in range(4)]
        assert codes(reads[:3]) == [200, 200, 200]
        assert_limited(reads[3])
        # address + method + path: another request's status, and a cancel, have their own
        assert native_client.get(f"/generate/text/status/{second}").status_code == 200
        assert native_client.delete(f"/generate/text/status/{first}").status_code == 200


def test_a_submission_through_the_front_is_counted_on_its_client(
    native_service: NativeService,
    native_client: httpx.Client,
    requester: MadeUser,
    make_user: Any,
) -> None:
    chat_pop(native_client, make_user("wk").api_key)
    # Only the per-client count is looked at: the others are raised out of the way.
    limits = (
        RateLimit("2 per hour", KEY_CLIENT_ROUTE),
        RateLimit(PLENTY, KEY_CLIENT_ROUTE),
        RateLimit(PLENTY, KEY_KEY_ROUTE),
    )

    def submit(**headers: str) -> httpx.Response:
        return chat_async(native_client, requester.api_key, chat_body(), **headers)

    with route_limits(native_service, "chat_async", *limits):
        client_a = [submit(**through_front("203.0.113.1")) for _ in range(3)]
        assert codes(client_a[:2]) == [202, 202]
        assert_limited(client_a[2])
        assert submit(**through_front("203.0.113.2")).status_code == 202
        # without the passkey a forwarded address is not believed: the peer is counted
        untrusted = {HEADER_FORWARDED_FOR: "203.0.113.3"}
        direct = [submit(**untrusted) for _ in range(3)]
        assert codes(direct[:2]) == [202, 202]
        assert_limited(direct[2])


def test_the_fronts_status_reads_are_counted_on_its_service_budget(
    native_service: NativeService,
    native_client: httpx.Client,
    requester: MadeUser,
    make_user: Any,
) -> None:
    chat_pop(native_client, make_user("wk").api_key)
    ids = [
        chat_async(
            native_client, requester.api_key, chat_body(), **through_front("203.0.113.9")
        ).json()["id"]
        for _ in range(2)
    ]
    status = RateLimit("2 per hour", KEY_CLIENT_ROUTE, service="5 per hour")

    def read(request_id: str, **headers: str) -> httpx.Response:
        return native_client.get(f"/generate/chat/status/{request_id}", headers=headers)

    with route_limits(native_service, "chat_status", status):
        direct = [read(ids[0]) for _ in range(3)]
        assert codes(direct[:2]) == [200, 200]
        assert_limited(direct[2])
        # the front's reads, each for the client that owns the request: more than that
        # client's count allows, and one budget over every request the front waits on
        front = [read(ids[0], **through_front("203.0.113.9")) for _ in range(3)]
        front += [read(ids[1], **through_front("203.0.113.9")) for _ in range(3)]
        assert codes(front[:5]) == [200] * 5
        assert_limited(front[5])
    cancel = native_client.delete(
        f"/generate/chat/status/{ids[0]}", headers=through_front("203.0.113.9")
    )
    assert cancel.status_code == 200


def test_the_anonymous_key_has_its_own_submit_limit(
    native_service: NativeService, native_client: httpx.Client, requester: MadeUser
) -> None:
    # Only the per-key count is looked at: the per-client ones are raised out of the way.
    limits = (
        RateLimit(PLENTY, KEY_CLIENT_ROUTE),
        RateLimit(PLENTY, KEY_CLIENT_ROUTE),
        RateLimit("1 per hour", KEY_KEY_ROUTE, anonymous="3 per hour"),
    )
    with route_limits(native_service, "text_async", *limits):
        keyed = [text_async(native_client, requester.api_key) for _ in range(2)]
        assert keyed[0].status_code == 202
        assert_limited(keyed[1])
        anonymous = [text_async(native_client, ANONYMOUS_API_KEY) for _ in range(4)]
        assert codes(anonymous[:3]) == [202, 202, 202]
        assert_limited(anonymous[3])


def test_each_request_is_checked_once_by_its_routes_limits(
    native_service: NativeService, native_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flask-limiter's before_request check (default and application limits, none here) is
    removed: a limited route is checked once, by its decorators, and an unlimited one never."""
    checks: list[str] = []
    check = Limiter._check_request_limit

    def counted(self: Limiter, *args: Any, **kwargs: Any) -> None:
        checks.append(flask.request.path)
        check(self, *args, **kwargs)

    monkeypatch.setattr(Limiter, "_check_request_limit", counted)
    app = create_app(native_service.context)  # the hooks bind the counted check
    with app.test_client() as client:
        assert client.get(ROUTES["models"].path).status_code == 200
        assert client.get(ROUTES["native_healthz"].path).status_code == 200
    assert checks == [ROUTES["models"].path]


def test_a_refused_submit_waits_its_windows_end_to_the_millisecond(
    native_service: NativeService, native_client: httpx.Client, requester: MadeUser
) -> None:
    """At the shipped limits (2 submits a second per client and per key): the third submit
    of a second is refused with retry-after-ms, the time left of the window the first two
    opened; a client that waits that long gets in (Retry-After's whole second would have it
    wait up to a second more than the window, on every third request of a loop)."""
    sent: list[tuple[float, httpx.Response, float]] = []
    refused = None
    for _ in range(20):  # a window may end between calls on a slow machine: go on until one is
        began = time.monotonic()
        response = text_async(native_client, requester.api_key)
        sent.append((began, response, time.monotonic()))
        if response.status_code == 429:
            refused = len(sent) - 1
            break
        assert response.status_code == 202, response.text
    assert refused is not None
    assert refused >= 2
    assert_limited(sent[refused][1])
    # the window opened at the hit of the submit two before the refused one (fixed windows
    # of one second; both limits of a second count the same submits)
    opened_from, _, opened_by = sent[refused - 2]
    refused_from, response, refused_by = sent[refused]
    wait = int(response.headers["retry-after-ms"]) / 1000
    assert opened_from + 1 - refused_by - 0.002 <= wait <= opened_by + 1 - refused_from + 0.002
    # whole seconds, never fewer than the wait (flask-limiter's alone could say 0)
    assert int(response.headers["Retry-After"]) >= math.ceil(wait)
    assert f"Try again in {wait:.2f} seconds." in response.json()["message"]
    time.sleep(wait)
    assert text_async(native_client, requester.api_key).status_code == 202


def test_a_refusal_waits_until_every_full_window_of_the_route_ends(
    native_service: NativeService,
    native_client: httpx.Client,
    requester: MadeUser,
    make_user: Callable[..., MadeUser],
) -> None:
    """A submit refused by one window while another of the route's windows is also full
    (the per-client and the per-key second, opened at different times) is told the later
    end: told the first, the client would be refused again by the second. On a busy
    machine the two windows one submit opens end a few milliseconds apart, and the client
    that waited out the first was refused."""
    other = make_user("other", kudos=10_000)
    first, second = through_front("203.0.113.7"), through_front("203.0.113.8")
    # the first address's window opens with another key
    assert text_async(native_client, other.api_key, **first).status_code == 202
    time.sleep(0.3)  # the gap between the two windows' ends, not a wait for an event
    key_opened = time.monotonic()
    # the requester's key fills its window, from the second address and then the first
    assert text_async(native_client, requester.api_key, **second).status_code == 202
    assert text_async(native_client, requester.api_key, **first).status_code == 202
    refused = text_async(native_client, requester.api_key, **first)
    refused_by = time.monotonic()
    assert refused.status_code == 429, refused.text
    wait = int(refused.headers["retry-after-ms"]) / 1000
    assert wait >= key_opened + 1 - refused_by - 0.002
    time.sleep(wait)
    assert text_async(native_client, requester.api_key, **first).status_code == 202


def test_retry_after_is_mended_after_flask_limiter_wrote_it(native_service: NativeService) -> None:
    """The mend of Retry-After (tests/unit/test_retry_after_covers_the_wait.py) must run after
    flask-limiter's header injection, which a refusal ending within the current second (a few
    in a hundred at 2 a second) would otherwise leave at 0. Flask calls after_request
    functions last registered first."""
    app = create_app(native_service.context)
    names = [getattr(getattr(f, "func", f), "__name__", "") for f in app.after_request_funcs[None]]
    # flask-limiter registers a functools.partial of its private __inject_headers
    assert names.index("_retry_after_covers_the_wait") < names.index("__inject_headers")
